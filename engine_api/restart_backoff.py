"""How long to wait before restarting something that died: a first delay, doubling to a cap, and back to the
first once a run has lasted long enough. A thing that dies right after each start (a bad environment) then
costs a few restarts a minute instead of every spare at once; one that dies now and then is restarted at once.

Pure: it tells the delay, the caller waits it (the front-end host and the service's worker supervisor do).
Time comes from an injected monotonic clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class BackoffPolicy:
    first_s: float = 0.5
    max_s: float = 8.0
    stable_s: float = 60.0  # a run this long resets the delay to first_s

    def __post_init__(self) -> None:
        if not 0 <= self.first_s <= self.max_s or self.stable_s < 0:
            raise ValueError(f"backoff needs 0 <= first_s <= max_s and stable_s >= 0: {self}")


class RestartBackoff:
    """The restart delays of one restartable thing (one front-end index, say)."""

    def __init__(self, policy: BackoffPolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self._policy = policy
        self._clock = clock
        self._next_s = policy.first_s
        self._started_at = clock()  # taken as started when created

    def started(self) -> None:
        """It (re)started now: its run is timed from here."""
        self._started_at = self._clock()

    def next_delay(self) -> float:
        """It died now: the delay before its next start. The first delay after a stable run, else double the last."""
        if self._clock() - self._started_at >= self._policy.stable_s:
            self._next_s = self._policy.first_s
        delay = self._next_s
        self._next_s = min(delay * 2, self._policy.max_s)
        return delay
