"""The service's one Config, built in one place from flags and VOXGATE_* environment variables."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, fields

DEFAULT_PORT = 50051


@dataclass(frozen=True)
class Config:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    engine: str = "sphinx"
    model: str = ""
    # Sessions the sidecar admits at once; more get UNAVAILABLE/CAPACITY.
    max_sessions: int = 16
    sidecar_socket: str = ""  # empty: a fresh private temp directory
    sidecar_start_timeout_s: float = 120.0
    sidecar_health_interval_s: float = 2.0
    sidecar_restart_backoff_s: float = 0.5
    retry_delay_s: float = 2.0
    # Largest audio payload in one request; the transport limit is above it so
    # the client gets our precise error rather than a generic one.
    max_audio_bytes_per_message: int = 65536
    max_message_bytes: int = 4 * 1024 * 1024
    endpointing_silence_ms: int = 800
    max_endpointing_silence_ms: int = 10000
    vad_aggressiveness: int = 2
    # 0 = unbounded.
    max_session_duration_s: float = 0.0
    idle_timeout_s: float = 30.0
    max_idle_timeout_s: float = 600.0
    final_flush_timeout_s: float = 10.0
    drain_grace_s: float = 10.0
    log_level: str = "info"


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per Config field (--max-sessions ...), defaulting to env VOXGATE_MAX_SESSIONS, then Config."""
    for f in fields(Config):
        flag = "--" + f.name.replace("_", "-")
        env = os.environ.get("VOXGATE_" + f.name.upper())
        kind: type = type(f.default)
        default = kind(env) if env is not None else f.default
        parser.add_argument(flag, type=kind, default=default, dest=f.name)


def config_from_args(args: argparse.Namespace) -> Config:
    return Config(**{f.name: getattr(args, f.name) for f in fields(Config)})
