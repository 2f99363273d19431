"""Serve one engine on a Unix socket: the engine API over gRPC, and each session's stream over frames.

Prints one line, `READY <pid>`, on stdout once it serves; the service waits for
it. It dies with its parent (PR_SET_PDEATHSIG), so a killed service never
leaves an engine holding memory or a GPU.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import signal
import stat
import sys
from collections.abc import Callable
from pathlib import Path

import grpc
import structlog

from engine_api.frames import frames_socket
from engine_api.sockets import private_umask
from engine_api.v1 import engine_pb2_grpc
from engine_sidecar.engines import create_engine
from engine_sidecar.engines.engine import Engine
from engine_sidecar.engines.voxtral.options import VoxtralOptions
from engine_sidecar.process.frames import FramesServer
from engine_sidecar.process.servicer import EngineServicer

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def prepare_socket(path: Path) -> None:
    """The socket's directory: created private (0700) when missing; a shared one is named in a warning.

    The socket itself is created 0600 (see `private_umask`): only this user can connect to the
    engine. A directory that others may write to (without the sticky bit) would let them
    replace the socket, so it gets a warning; the service's default directory is a fresh 0700 one.
    """
    parent = path.parent
    # exist_ok: K front ends of one sidecar prepare their sockets in one directory at the same moment
    parent.mkdir(parents=True, mode=0o700, exist_ok=True)
    st = parent.stat()
    if st.st_uid != os.getuid() or (st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX):
        structlog.get_logger("sidecar").warning(
            "sidecar_socket_dir_not_private",
            dir=str(parent),
            mode=oct(st.st_mode & 0o7777),
            owner=st.st_uid,
            message="other users may replace the engine socket here; use a directory only this user can write",
        )
    path.unlink(missing_ok=True)


async def serve(
    args: argparse.Namespace,
    options: VoxtralOptions | None = None,
    engine: Engine | None = None,
    announce: Callable[[], None] | None = None,
    frontend_sockets: tuple[str, ...] = (),
) -> int:
    """Serve one engine on args.socket. `engine`: built by the caller (a front end of a shared engine core),
    else from args and `options`; `announce`: called once serving, instead of printing the READY line;
    `frontend_sockets`: every front end's socket of a shared engine core, which its status lists."""
    log = structlog.get_logger("sidecar")
    if engine is None:
        engine = create_engine(args.engine, args.model, args.max_sessions, options)
    await engine.start()
    socket_path = Path(args.socket)
    prepare_socket(socket_path)
    # A small, fixed HTTP/2 window (no BDP growth): audio queued for the engine stays
    # bounded (~2 s per session) and the service's backpressure reaches the client.
    server = grpc.aio.server(options=[("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 65536)])
    servicer = EngineServicer(engine, frontend_sockets)
    engine_pb2_grpc.add_EngineServicer_to_server(servicer, server)
    # Sessions travel as length-prefixed messages on their own socket (engine_api/frames.py), bound before the
    # gRPC socket so that a service which sees the gRPC socket finds this one too.
    frames = FramesServer(servicer)
    frames_path = frames_socket(socket_path)
    with private_umask():
        await frames.start(frames_path)
        os.chmod(frames_path, 0o600)
        server.add_insecure_port(f"unix:{socket_path}")
        await server.start()
    os.chmod(socket_path, 0o600)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if announce is None:
        print(f"READY {os.getpid()}", flush=True)
    else:
        announce()
    log.info("sidecar_ready", engine=engine.info.name, model=engine.info.model, socket=str(socket_path))
    await stop.wait()
    log.info("sidecar_stopping")
    await asyncio.gather(frames.stop(grace_s=2.0), server.stop(grace=2.0))
    await engine.shutdown()
    return 0
