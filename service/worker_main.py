"""One service worker of `voxgate serve --workers N`: `python -m service.worker_main` (spawned by
service/workers.py, never by hand). A whole Server that shares the port and relays resumes (service/peers.py).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import signal
import sys

from .early_stop import take_sigterm_as_stop

PR_SET_PDEATHSIG = 1


def _die_with_parent(parent_pid: int) -> None:
    """SIGTERM (a drain) when the parent dies, so a killed parent never leaves workers holding the port."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent_pid:  # it died before the line above
        sys.exit(1)


def main(argv: list[str] | None = None) -> int:
    take_sigterm_as_stop()  # the parent may stop us while we import (service/early_stop.py)
    import structlog

    from .config import Config
    from .logs import configure_logging
    from .peers import WorkerRole

    parser = argparse.ArgumentParser(prog="voxgate-worker")
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--peer-dir", required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--config", required=True, help="the worker's Config as JSON")
    args = parser.parse_args(argv)
    _die_with_parent(args.parent_pid)
    config = Config(**json.loads(args.config))
    configure_logging(config.log_level)
    structlog.contextvars.bind_contextvars(worker=args.index)  # every line of this process names its worker
    from .server import Server

    try:
        asyncio.run(Server(config, worker=WorkerRole(args.index, args.count, args.peer_dir)).serve())
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # a start-up failure: say what, exit non-zero (the parent reports it)
        print(f"voxgate worker {args.index}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
