"""A front-end process of a shared Voxtral engine core (process/core_host.py starts it)."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from engine_api.frontends import frontend_socket
from engine_api.logs import configure_logging
from engine_sidecar.engines.voxtral.engine import VoxtralEngine
from engine_sidecar.engines.voxtral.frontend_client import FrontEndClient
from engine_sidecar.process.serving import die_with_parent, serve


def run_frontend(args: argparse.Namespace, client: FrontEndClient, ready: Any) -> None:
    """Child process (multiprocessing spawn): serve the engine API on this front end's socket; set `ready` when
    serving. No READY line: the supervisor prints the sidecar's one, once every front end serves."""
    die_with_parent()
    configure_logging()
    ns = argparse.Namespace(**{**vars(args), "socket": frontend_socket(args.socket, client.index)})
    engine = VoxtralEngine(model=args.model, max_sessions=args.max_sessions,
                           options=json.loads(args.engine_options) if args.engine_options else None, client=client)
    raise SystemExit(asyncio.run(serve(ns, engine=engine, announce=ready.set)))
