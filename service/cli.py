"""`voxgate`: serve, transcribe, and the internal sidecar command.

The one composition root: the only module of the service that imports the engine sidecar, to offer
`voxgate sidecar` (= `python -m engine_sidecar`), `voxgate plan` and `voxgate tiny-checkpoint` by delegating.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

from engine_sidecar.engines import engine_options
from engine_sidecar.engines.voxtral.flags import add_engine_arguments, option_items
from engine_sidecar.engines.voxtral.plan.cli import add_plan_arguments
from engine_sidecar.process.main import add_sidecar_arguments
from voxgate_client.cli import add_transcribe_arguments, run_transcribe
from voxgate_client.status import add_status_arguments, run_status

from .bench.cli import add_bench_arguments
from .config import add_config_arguments, config_from_args
from .logs import configure_logging
from .security.token_cli import add_token_arguments, run_token


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="voxgate", description="Real-time speech-to-text over gRPC.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the service (spawns its engine sidecar)")
    add_config_arguments(serve)
    add_engine_arguments(serve)
    status = sub.add_parser("status", help="a running server: health, engine, capacity, active sessions")
    add_status_arguments(status)
    transcribe = sub.add_parser("transcribe", help="stream a WAV or raw file to a server")
    add_transcribe_arguments(transcribe)
    token = sub.add_parser("token", help="make bearer tokens and their hashed token-file entries")
    add_token_arguments(token)
    plan = sub.add_parser("plan", help="plan Voxtral capacity: KV per stream, streams per GPU, flags to use")
    add_plan_arguments(plan)
    tiny = sub.add_parser("tiny-checkpoint", help="write the tiny random Voxtral checkpoint (CPU tests, demos)")
    tiny.add_argument("dir", help="directory to write params.json, tekken.json, consolidated.safetensors into")
    tiny.add_argument("--seed", type=int, default=0)
    bench = sub.add_parser("bench", help="load-test a server: N paced real-time sessions, latency, CPU, sweep")
    add_bench_arguments(bench)
    sidecar = sub.add_parser("sidecar", help="run the engine sidecar on a Unix socket (= python -m engine_sidecar)")
    add_sidecar_arguments(sidecar)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command != "serve":  # service/early_stop.py: only a server takes an early SIGTERM as a stop
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if args.command == "status":
        return run_status(args)
    if args.command == "transcribe":
        return run_transcribe(args)
    if args.command == "token":
        return run_token(args)
    if args.command == "bench":
        from .bench.cli import run_bench

        return run_bench(args)
    if args.command == "plan":
        from engine_sidecar.engines.voxtral.plan.cli import run_plan

        return run_plan(args)
    if args.command == "tiny-checkpoint":
        from engine_sidecar.engines.voxtral.tiny_checkpoint import build_tiny_checkpoint

        print(build_tiny_checkpoint(Path(args.dir), seed=args.seed))
        return 0
    if args.command == "sidecar":
        from engine_sidecar.process.main import run_sidecar

        configure_logging()
        return run_sidecar(args)
    try:
        engine_options(args)  # wrong engine settings fail here, before any process starts
    except ValueError as exc:
        print(f"voxgate serve: {exc}", file=sys.stderr)
        return 2
    config = config_from_args(args, option_items(args))
    configure_logging(config.log_level)
    if config.workers != 1:
        from .workers import run_workers  # a parent: N worker processes and one sidecar

        return run_workers(config)
    from .server import Server

    try:
        asyncio.run(Server(config).serve())
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # a start-up failure: say what, exit non-zero
        print(f"voxgate: {exc}", file=sys.stderr)
        return 1
    return 0
