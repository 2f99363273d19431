"""Sidecar process entry point: `python -m engine_sidecar --engine NAME --socket PATH` (also `voxgate sidecar`).

Its flags, typed once here into the engine's options, and which process layout serves them: one engine in
this process (serving.py), or a Voxtral engine core with K front-end processes (core_host.py).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from engine_api.sockets import allow_open_files
from engine_sidecar.engines import ENGINE_NAMES, engine_options
from engine_sidecar.engines.engine import EngineStartError
from engine_sidecar.engines.voxtral.flags import add_engine_arguments, apply_preset_env
from engine_sidecar.process.serving import die_with_parent, serve

EXIT_BAD_OPTIONS = 2  # as argparse exits on a bad flag
EXIT_ENGINE_START = 1


def add_sidecar_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine", choices=ENGINE_NAMES, default="whisper")
    parser.add_argument(
        "--model", default="", help="engine model path or id (whisper: CTranslate2 Whisper dir; fake: script JSON)"
    )
    parser.add_argument("--socket", required=True, help="Unix socket path to serve on")
    parser.add_argument("--max-sessions", type=int, default=16)
    add_engine_arguments(parser)


def run_sidecar(args: argparse.Namespace) -> int:
    die_with_parent()
    allow_open_files()  # a frames connection per session (its front-end processes inherit the limit)
    try:
        options = engine_options(args)
    except ValueError as exc:
        print(f"voxgate sidecar: {exc}", file=sys.stderr, flush=True)
        return EXIT_BAD_OPTIONS
    apply_preset_env(args)
    if options is not None and options.frontends > 1:
        # One engine core, K front-end processes (vLLM's multi-client mechanism): process/core_host.py.
        from engine_sidecar.process.core_host import run_core_host

        return run_core_host(args, options)
    try:
        return asyncio.run(serve(args, options))
    except EngineStartError as exc:
        print(f"voxgate sidecar: {exc}", file=sys.stderr, flush=True)
        return EXIT_ENGINE_START
