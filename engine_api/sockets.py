"""How voxgate's Unix sockets are made private (the engine sidecar's and the service workers' own).

A socket bound inside `private_umask()` is 0600: only this user can connect. Both processes bind such sockets,
and neither may import the other, so the one piece lives here.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def private_umask() -> Iterator[None]:
    """Files created meanwhile get no group/other permissions."""
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)
