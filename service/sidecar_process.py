"""The sidecar as a process: its command line and environment, how its exit is seen, and whether its socket can
be trusted. The supervisor (sidecar.py) runs it; the worker parent (workers.py) shares its start error.
"""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from pathlib import Path

from .config import Config

EXIT_POLL_S = 0.05
SIDECAR_MODULE = "engine_sidecar"  # run as `python -m engine_sidecar`: the sidecar never loads the service


def sidecar_command(c: Config, socket: Path) -> list[str]:
    """The sidecar process's command line (its flags: engine_sidecar.process.main.add_sidecar_arguments)."""
    cmd = [
        sys.executable,
        "-m",
        SIDECAR_MODULE,
        "--engine",
        c.engine,
        "--model",
        c.model,
        "--socket",
        str(socket),
        "--max-sessions",
        str(c.max_sessions),
    ]
    if c.preset:
        cmd += ["--preset", c.preset]
    for item in c.engine_options:
        cmd += ["--engine-option", item]
    return cmd


class SidecarStartError(RuntimeError):
    pass


async def exit_code(proc: asyncio.subprocess.Process) -> int:
    """The exit code as soon as the process is gone. Process.wait() also waits for its pipes to close, and the
    vLLM processes it started may hold its stdout for seconds after it died."""
    while proc.returncode is None:  # noqa: ASYNC110  (no event but wait(), which also waits for the pipes)
        await asyncio.sleep(EXIT_POLL_S)
    return proc.returncode


def check_private_socket(path: Path) -> None:
    """Refuse an engine socket that another user owns or may connect to (it must be ours, 0600 or stricter)."""
    st = path.stat()
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise SidecarStartError(
            f"engine socket {path} is not a private socket of this user "
            f"(mode {oct(st.st_mode & 0o777)}, owner {st.st_uid})"
        )
