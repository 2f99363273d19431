"""The private socket directories a service makes in the temp dir, named after the process that owns them,
and the sweep that removes those a killed process left behind.

A service stopped cleanly removes its directories; one killed with SIGKILL (an OOM kill, a node's hard stop)
cannot, and each restart would leave another `voxgate-*` directory of dead sockets in /tmp. Each directory's
name carries its owner's pid, so a new service removes those whose owner is gone: only this user's, only
sockets in them, and the directory only once it is empty (anything else put there is left alone).
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from pathlib import Path

import structlog

log = structlog.get_logger("service")

PREFIX = "voxgate-"


def make_private_dir(kind: str = "") -> Path:
    """A fresh 0700 directory (mkdtemp) named `voxgate-<kind><pid>-…`, after sweeping stale ones of the kind."""
    sweep_stale(kind)
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{kind}{os.getpid()}-"))


def sweep_stale(kind: str = "", parent: Path | None = None) -> list[Path]:
    """Remove this user's `voxgate-<kind><pid>-…` directories whose process is gone; the ones removed."""
    pattern = re.compile(rf"{re.escape(PREFIX + kind)}(\d+)-[^/]+")
    removed: list[Path] = []
    try:
        entries = list((parent or Path(tempfile.gettempdir())).iterdir())
    except OSError:
        return removed
    for entry in entries:
        if not (m := pattern.fullmatch(entry.name)) or _alive(int(m[1])):
            continue
        try:
            st = entry.lstat()
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                continue
            for item in entry.iterdir():
                if stat.S_ISSOCK(item.lstat().st_mode):
                    item.unlink()
            entry.rmdir()
        except OSError:  # not empty (not ours to judge), or raced: left as it is
            continue
        removed.append(entry)
    if removed:
        log.info("stale_socket_dirs_removed", count=len(removed))
    return removed


def _alive(pid: int) -> bool:
    if pid <= 0:
        return True  # not a pid we would have written: leave it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True
