"""`voxgate status`: what a running server offers and how full it is.

`voxgate status --check live|ready` is a probe instead (a Kubernetes exec probe, a container
health check): only gRPC health, which needs no token, over TLS or mutual TLS as the --tls-*
flags say; exit status 0 when SERVING, 1 otherwise (the reason on stderr).
"""

# grpcio-health-checking ships no py.typed marker.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import argparse
import json
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ._proto import speech_pb2, speech_pb2_grpc
from .responses import capabilities_to_dict, error_details, format_error
from .security import DEFAULT_ADDRESS, add_connection_arguments, connection_from_args

DEFAULT_SERVER = DEFAULT_ADDRESS
HEALTH_NAMES = {
    health_pb2.HealthCheckResponse.SERVING: "SERVING",
    health_pb2.HealthCheckResponse.NOT_SERVING: "NOT_SERVING",
}
# --check: which gRPC health service answers it ("" is the whole server: liveness).
CHECKS = {"live": "", "ready": "voxgate.v1.Speech"}


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", default=DEFAULT_SERVER, help="HOST:PORT (default %(default)s)")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    parser.add_argument(
        "--check",
        choices=sorted(CHECKS),
        help="probe: only gRPC health (live: the server; ready: it admits sessions), no token "
        "needed; exit 0 when SERVING, else 1",
    )
    parser.add_argument(
        "--timeout", type=float, default=5.0, metavar="SECONDS", help="per health call (default 5)"
    )
    add_connection_arguments(parser)


def _health(channel: grpc.Channel, service: str, timeout: float = 5.0) -> str:
    try:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
    except grpc.RpcError as exc:
        return str(exc.code().name)
    return HEALTH_NAMES.get(reply.status, str(reply.status))


POSITION_MODE_TEXT = {
    "reanchor": "re-anchoring: unbounded sessions, no seam",
    "rollover": "rollover: unbounded sessions, model context restarts near max_model_len",
    "capped": "capped: sessions end at the engine's position limit",
}


def run_status(args: argparse.Namespace) -> int:
    try:
        connection = connection_from_args(args)
    except (OSError, ValueError) as exc:
        print(f"voxgate status: error: {exc}", file=sys.stderr)
        return 2
    timeout = getattr(args, "timeout", 5.0)
    if getattr(args, "check", None):
        with connection.channel(args.server) as channel:
            health = _health(channel, CHECKS[args.check], timeout)
        if health == "SERVING":
            return 0
        print(f"voxgate status: {args.server} {args.check}: {health}", file=sys.stderr)
        return 1
    with connection.channel(args.server) as channel:
        try:
            caps = speech_pb2_grpc.SpeechStub(channel).GetCapabilities(
                speech_pb2.GetCapabilitiesRequest(), timeout=10, metadata=connection.metadata
            )
        except grpc.RpcError as exc:
            print(f"voxgate status: {format_error(error_details(exc))}", file=sys.stderr)
            return 1
        status = {
            "server": args.server,
            "live": _health(channel, CHECKS["live"], timeout),
            "ready": _health(channel, CHECKS["ready"], timeout),
            **capabilities_to_dict(caps),
        }
    if args.json:
        print(json.dumps(status))
        return 0
    engine = status.get("engine", {})
    print(f"{args.server}: live {status['live']}, accepting sessions: {status['ready']}")
    print(f"engine     {engine.get('name', '?')} ({engine.get('model', '?')})")
    active, limit = status.get("active_sessions", 0), status.get("max_sessions", "?")
    print(f"sessions   {active} active of {limit}")
    if cap := status.get("capacity"):
        service, sidecar = cap["service_sessions"], cap["sidecar_slots"]
        engine = cap["engine_sessions"]
        apart = "" if service == sidecar == engine else "  (apart: they agree once sessions end)"
        print(
            f"capacity   service {service}, sidecar slots {sidecar}, engine {engine}; "
            f"mismatches {cap['mismatches']}{apart}"
        )
        if workers := cap.get("workers"):
            shares = ", ".join(f"worker {w['worker']}: {w['sessions']}" for w in workers)
            print(f"workers    {shares}")
        engines = cap.get("engines", [])
        for e in engines if len(engines) > 1 else []:
            bound = e["max_sessions"] or "unbounded"
            print(
                f"engine {e['engine']}   {'up' if e['ready'] else 'DOWN'}, sidecar slots "
                f"{e['sidecar_slots']} of {bound}, engine {e['engine_sessions']}"
            )
    print(
        f"audio      {', '.join(status.get('encodings', []))}; "
        f"{status.get('min_sample_rate_hz')}-{status.get('max_sample_rate_hz')} Hz; "
        f"up to {status.get('max_audio_channel_count')} channel(s)"
    )
    print(f"languages  {', '.join(status.get('languages', [])) or '?'}")
    if mode := status.get("position_mode"):
        reason = status.get("position_mode_reason")
        text = POSITION_MODE_TEXT.get(mode, mode)
        print(f"positions  {text}" + (f" ({reason})" if reason else ""))
    if runtime := status.get("position_runtime"):
        scheduling = "on" if runtime["async_scheduling"] else "off"
        print(
            f"runtime    {runtime['model_runner']}, async scheduling {scheduling}, "
            f"kv cache dtype {runtime['kv_cache_dtype']}"
        )
        for i, g in enumerate(runtime["kv_groups"]):
            print(
                f"kv group {i} {g['kind'] or '?'}: block {g['block_size']}, "
                f"window {g['window']}, {g['attention_backend'] or '?'}, {g['dtype'] or '?'}, "
                f"keys {g['key_layout'] or 'not probed'}"
            )
    return 0
