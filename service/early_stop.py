"""A SIGTERM before a server's own handler is installed: a clean exit (0), not death by the signal.

Importing the CLI or a worker takes half a second (gRPC, protobuf, the engines' option tables), and a
server's drain handler comes after that. A SIGTERM in between used to kill the process (exit -15: an
orchestrator that stops a pod at once, a parent stopping workers it just spawned), although nothing had
started, so a stop then is simply a clean exit. The server's event loop replaces this handler with its
drain when it starts.
"""

from __future__ import annotations

import signal
from types import FrameType


def stop_before_start(_signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(0)


def take_sigterm_as_stop() -> None:
    signal.signal(signal.SIGTERM, stop_before_start)
