"""A SIGTERM before a server's own handler is installed: a clean exit (0), not death by the signal.

Importing the CLI or a worker takes half a second (gRPC, protobuf, the engines' option tables), and a
server's drain handler comes after that. A SIGTERM in between used to kill the process (exit -15: an
orchestrator that stops a pod at once, a parent stopping workers it just spawned), although nothing had
started, so a stop then is simply a clean exit. The server's event loop replaces this handler with its
drain when it starts.

The handler exits at once (`os._exit`) rather than raising SystemExit: a signal handler runs between any
two bytecodes of the import in progress, and an exception raised there can be rewrapped by the code it
lands in (a dataclass field's `__set_name__` turns it into a RuntimeError: exit 1 and a traceback).
Nothing has started yet, so there is nothing to unwind; only Python's own stream buffers are flushed.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType


def stop_before_start(_signum: int, _frame: FrameType | None) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed stream or a reentrant flush must not block the exit
            pass
    os._exit(0)


def take_sigterm_as_stop() -> None:
    signal.signal(signal.SIGTERM, stop_before_start)
