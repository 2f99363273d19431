"""The service's one Config, built in one place from flags and VOXGATE_* environment variables.

Precedence: command-line flag > environment (VOXGATE_<FIELD>) > default here.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, fields

from . import limits

DEFAULT_PORT = 50051
ENGINE_FIELDS = ("preset", "engine_options")
SPEECH_DETECTORS = ("webrtcvad", "silero")
CHOICES = {"speech_detector": SPEECH_DETECTORS}  # the flags whose values are names from a list


@dataclass(frozen=True)
class Config:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""
    auth_tokens_file: str = ""
    tenant_max_sessions: int = 0
    engine: str = "whisper"
    model: str = ""
    # The engine's settings, passed to the sidecar unread (it types them: engine_sidecar/engines/voxtral/flags.py):
    preset: str = ""  # --preset NAME
    engine_options: tuple[str, ...] = ()  # KEY=VALUE items: the named engine flags and every --engine-option
    max_sessions: int = 16
    workers: int = 1  # service processes on the one port (service/workers.py)
    sidecar_socket: str = ""
    sidecar_external: bool = False  # attach to a sidecar started by someone else (a container, a unit)
    sidecar_start_timeout_s: float = 300.0
    sidecar_health_interval_s: float = 2.0
    sidecar_restart_backoff_s: float = 0.5
    engines: int = 1  # engine sidecars, each its own process and socket (service/engine_pool.py)
    gpus: str = ""  # "all" or "0,1,…": one engine per GPU, pinned (service/gpus.py); "": no pinning
    retry_delay_s: float = 2.0
    max_audio_bytes_per_message: int = limits.AUDIO_MESSAGE.value  # bytes
    max_message_bytes: int = limits.MESSAGE.value  # bytes
    endpointing_silence_ms: int = 800
    max_endpointing_silence_ms: int = 10000
    vad_aggressiveness: int = 2
    speech_detector: str = "webrtcvad"
    max_session_duration_s: float = 0.0
    idle_timeout_s: float = 30.0
    max_idle_timeout_s: float = 600.0
    final_flush_timeout_s: float = 10.0
    drain_grace_s: float = 10.0
    resume_window_s: float = 30.0
    keepalive_time_s: float = 20.0
    keepalive_timeout_s: float = 10.0
    engine_recovery_timeout_s: float = 60.0
    freeze_timeout_s: float = 15.0
    max_replay_ms: int = limits.REPLAY.value
    flow_status_interval_ms: int = 1000
    log_level: str = "info"
    metrics_port: int = 0
    otel_endpoint: str = ""


HELP = {
    "host": "address to listen on (loopback unless you mean it)",
    "port": "gRPC port (0: pick a free one and print it)",
    "tls_cert": "PEM certificate chain to serve TLS with (with --tls-key; reloaded on SIGHUP)",
    "tls_key": "PEM private key of --tls-cert",
    "tls_client_ca": "PEM CA bundle: clients must present a certificate it issued (mutual TLS)",
    "auth_tokens_file": "bearer tokens (hashed) to tenants; set: every RPC but health and reflection needs one "
    "(reloaded on SIGHUP; see docs/security.md)",
    "tenant_max_sessions": "concurrent sessions per tenant unless its token entry says (0: only --max-sessions)",
    "engine": "engine the sidecar runs: whisper (embedded CPU, default), sphinx (lightest CPU), voxtral (vLLM), "
    "fake (tests)",
    "model": "engine model: path or id (whisper: CTranslate2 Whisper dir, default tiny.en; voxtral: checkpoint "
    "dir; fake: script JSON)",
    "max_sessions": "concurrent sessions admitted; more get UNAVAILABLE/CAPACITY",
    "workers": "service worker processes sharing the port (SO_REUSEPORT) and one engine sidecar; "
    "--max-sessions holds across them all (1: one process, no parent)",
    "sidecar_socket": "Unix socket of the engine sidecar (default: a private temp dir)",
    "sidecar_external": "do not spawn the sidecar: attach to one already serving on --sidecar-socket "
    "(another container or unit) and wait for it whenever it restarts",
    "sidecar_start_timeout_s": "how long the sidecar may take to become ready",
    "sidecar_health_interval_s": "seconds between sidecar health checks",
    "sidecar_restart_backoff_s": "first delay before restarting a dead sidecar (doubles, up to 10 s, while it "
    "keeps dying within a minute of its start)",
    "engines": "engine sidecars to run (on the CPU: tests); sessions go to the one with most free capacity, "
    "and move to another when theirs dies (with several, --sidecar-socket S means S.0, S.1, …; "
    "several Voxtral engines get disjoint CPU cores unless VLLM_CPU_OMP_THREADS_BIND is set)",
    "gpus": "one engine per GPU, each pinned to its device (CUDA_VISIBLE_DEVICES): all (counted with "
    "nvidia-smi -L; if CUDA_VISIBLE_DEVICES is set, its entries) or ids 0,1,… (indices into "
    "CUDA_VISIBLE_DEVICES if set; empty: no pinning)",
    "retry_delay_s": "RetryInfo delay sent with UNAVAILABLE",
    "max_audio_bytes_per_message": "largest audio payload in one request",
    "max_message_bytes": "transport limit on one gRPC message",
    "endpointing_silence_ms": "default silence that ends an utterance",
    "max_endpointing_silence_ms": "largest endpointing silence a client may ask for",
    "vad_aggressiveness": "webrtcvad aggressiveness 0..3",
    "speech_detector": "what decides that audio is speech: webrtcvad alone (fast; music passes as speech), or "
    "silero: webrtcvad, vetoed where the Silero VAD network hears no speech and the audio is tonal or a DTMF "
    "key, so music and tones do not pass (docs/operating.md)",
    "max_session_duration_s": "audio seconds after which a session ends (0: unbounded)",
    "idle_timeout_s": "default seconds without a client message before a session ends",
    "max_idle_timeout_s": "largest idle timeout a client may ask for",
    "final_flush_timeout_s": "how long the engine may take to deliver finals at the end",
    "drain_grace_s": "on SIGTERM, how long sessions get to finish",
    "resume_window_s": "how long a disconnected session waits for its client to resume it",
    "keepalive_time_s": "seconds between HTTP/2 pings to each client: a connection that died silently (NAT, "
    "proxy) is closed after this + --keepalive-timeout-s and its session waits for a resume "
    "(0: off)",
    "keepalive_timeout_s": "how long a ping may go unanswered before the connection is taken for dead",
    "engine_recovery_timeout_s": "how long a live session waits for a restarted engine before it ends",
    "freeze_timeout_s": "audio sent but not taken in by the engine for this long: the engine session is reset "
    "(a pause is not a freeze; docs/operating.md lists every liveness check)",
    "max_replay_ms": "most audio replayed into a fresh engine session after a seam (older is dropped)",
    "flow_status_interval_ms": "default interval of FlowStatus responses (when a client enables them)",
    "otel_endpoint": "OTLP/gRPC endpoint for session traces, e.g. http://127.0.0.1:4317 (needs the otel extra)",
    "metrics_port": "Prometheus /metrics HTTP port on --host (0: off)",
    "log_level": "debug, info, warning, error",
}


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per Config field (--max-sessions ...), defaulting to env VOXGATE_MAX_SESSIONS, then Config."""
    for f in fields(Config):
        if f.name in ENGINE_FIELDS:
            continue  # the engine's flags (the voxtral group), which the sidecar reads
        env_name = "VOXGATE_" + f.name.upper()
        env = os.environ.get(env_name)
        kind: type = type(f.default)
        if kind is bool:
            on = env.strip().lower() in ("1", "true", "yes", "on") if env is not None else f.default
            parser.add_argument(
                "--" + f.name.replace("_", "-"),
                action=argparse.BooleanOptionalAction,
                default=on,
                dest=f.name,
                help=f"{HELP[f.name]} [env {env_name}]",
            )
            continue
        default = kind(env) if env is not None else f.default
        parser.add_argument(
            "--" + f.name.replace("_", "-"),
            type=kind,
            default=default,
            choices=CHOICES.get(f.name),
            dest=f.name,
            help=f"{HELP[f.name]} [env {env_name}; default: %(default)s]",
        )


def config_from_args(args: argparse.Namespace, engine_options: tuple[str, ...] = ()) -> Config:
    """`engine_options`: the engine flags given, as KEY=VALUE items (the composition root renders them)."""
    values = {f.name: getattr(args, f.name) for f in fields(Config) if f.name not in ENGINE_FIELDS}
    return Config(**values, preset=getattr(args, "preset", None) or "", engine_options=engine_options)
