"""Ctrl-C for a command that streams audio: the first one stops the audio, the second one aborts.

Stopping the audio half-closes the stream, so the server finalizes the utterance in progress,
sends its final and ends the session at once (its slot is free, nothing waits for a resume).
A second Ctrl-C raises KeyboardInterrupt as usual: the stream is cancelled.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterable, Iterator
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")


class Interrupt:
    def __init__(self, notice: str = "") -> None:
        self.requested = threading.Event()
        self._notice = notice  # said on stderr at the first Ctrl-C
        self._previous: Any = None
        self._installed = False

    def audio(self, items: Iterable[T]) -> Iterator[T]:
        """`items` until the first Ctrl-C."""
        for item in items:
            if self.requested.is_set():
                return
            yield item

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested.is_set():
            raise KeyboardInterrupt
        self.requested.set()
        if self._notice:
            print(self._notice, file=sys.stderr, flush=True)

    def __enter__(self) -> Interrupt:
        if threading.current_thread() is threading.main_thread():  # signal handlers live there only
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False
