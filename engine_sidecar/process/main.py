"""Sidecar process entry point: `python -m engine_sidecar --engine NAME --socket PATH` (also `voxgate sidecar`).

Its flags, and which process layout serves them: one engine in this process (serving.py), or a Voxtral
engine core with K front-end processes (core_host.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json

from engine_api.sockets import allow_open_files
from engine_sidecar.engines import ENGINE_NAMES
from engine_sidecar.process.serving import die_with_parent, serve


def add_sidecar_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine", choices=ENGINE_NAMES, default="sphinx")
    parser.add_argument("--model", default="", help="engine model path or id (fake: script JSON)")
    parser.add_argument("--socket", required=True, help="Unix socket path to serve on")
    parser.add_argument("--max-sessions", type=int, default=16)
    parser.add_argument("--engine-options", default="", help="engine options as a JSON object")


def run_sidecar(args: argparse.Namespace) -> int:
    die_with_parent()
    allow_open_files()  # a frames connection per session (its front-end processes inherit the limit)
    if args.engine == "voxtral" and _frontends(args) > 1:
        # One engine core, K front-end processes (vLLM's multi-client mechanism): process/core_host.py.
        from engine_sidecar.process.core_host import run_core_host

        return run_core_host(args)
    return asyncio.run(serve(args))


def _frontends(args: argparse.Namespace) -> int:
    options = json.loads(args.engine_options) if args.engine_options else {}
    return int(options.get("frontends", 1)) if isinstance(options, dict) else 1
