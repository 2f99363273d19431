"""A front-end process of a shared Voxtral engine core (process/core_host.py starts it)."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from engine_api.logs import configure_logging
from engine_sidecar.engines.voxtral.engine import VoxtralEngine
from engine_sidecar.engines.voxtral.frontend_client import FrontEndClient, frontend_socket, frontend_sockets
from engine_sidecar.engines.voxtral.options import VoxtralOptions
from engine_sidecar.process.serving import die_with_parent, serve


def run_frontend(args: argparse.Namespace, options: VoxtralOptions, client: FrontEndClient, ready: Any) -> None:
    """Child process (multiprocessing spawn): serve the engine API on this front end's socket; set `ready` when
    serving. No READY line: the supervisor prints the sidecar's one, once every front end serves."""
    die_with_parent()
    configure_logging()
    ns = argparse.Namespace(**{**vars(args), "socket": frontend_socket(args.socket, client.index)})
    engine = VoxtralEngine(model=args.model, max_sessions=args.max_sessions, options=options, client=client)
    raise SystemExit(
        asyncio.run(
            serve(ns, engine=engine, announce=ready.set, frontend_sockets=frontend_sockets(args.socket, client.count))
        )
    )
