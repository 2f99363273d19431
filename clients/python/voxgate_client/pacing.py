"""Real-time pacing of audio: when each chunk may be sent."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Pacer"]


class Pacer:
    """Schedules chunks against a wall clock at `speed` x real time.

    A chunk is due when all audio before it would have played, measured from
    the first chunk; using an absolute schedule keeps sleep jitter from
    accumulating into drift. `speed=None` means never wait.
    """

    def __init__(self, speed: float | None, clock: Callable[[], float] = time.monotonic):
        if speed is not None and speed <= 0:
            raise ValueError("pace must be positive (or None for no pacing)")
        self._speed = speed
        self._clock = clock
        self._start: float | None = None
        self._sent_s = 0.0  # audio seconds scheduled so far

    def delay(self, duration_s: float) -> float:
        """Seconds to wait before sending a chunk of `duration_s`; records the chunk."""
        if self._speed is None:
            return 0.0
        now = self._clock()
        if self._start is None:
            self._start = now
        due = self._start + self._sent_s / self._speed
        self._sent_s += duration_s
        return max(0.0, due - now)
