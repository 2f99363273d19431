"""How voxgate's Unix sockets are made private (the engine sidecar's and the service workers' own), and room for
as many as its sessions need.

A socket bound inside `private_umask()` is 0600: only this user can connect. Both processes bind such sockets,
and neither may import the other, so the one piece lives here.
"""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Iterator


@contextlib.contextmanager
def private_umask() -> Iterator[None]:
    """Files created meanwhile get no group/other permissions."""
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def allow_open_files() -> int:
    """Raise this process's soft limit on open files to its hard limit; returns the soft limit now in force.

    Each session holds a frames connection on each side (and a client connection in the service), so the soft
    limit many systems start processes with (1024: systemd's default) would stop a process near 500 sessions
    with EMFILE. The hard limit is the operator's; an unlimited one is taken as 1048576 (Linux's nr_open).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):  # a platform that refuses keeps what it had
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
