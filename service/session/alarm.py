"""Waiting on the injected clock: an alarm whose deadline moves, and a plain sleep.

Nothing here polls: a wait ends when the clock calls back (service.clock.Clock.call_later),
so a test's fake clock decides when every deadline of a session passes.
"""

from __future__ import annotations

import asyncio

from ..clock import Cancellable, Clock


class Alarm:
    """Goes off once the clock reaches the earliest time it was asked to wake by.

    A watcher waits on it, then checks its deadlines against the clock and sets it again. Deadlines
    that only move later need not tell the alarm: it goes off early, the watcher finds nothing due
    and sets it to the new time. One that may move earlier calls `wake_by`.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._at: float | None = None
        self._pending: Cancellable | None = None
        self._rang = asyncio.Event()

    def wake_by(self, at: float) -> None:
        """Go off no later than clock time `at`."""
        if self._at is not None and self._at <= at:
            return
        if self._pending is not None:
            self._pending.cancel()
        self._at = at
        self._pending = self._clock.call_later(max(at - self._clock.monotonic(), 0.0), self._ring)

    def ring_now(self) -> None:
        """Go off at once (something the watcher waits for has changed)."""
        self._ring()

    def _ring(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
        self._at = self._pending = None
        self._rang.set()

    async def wait(self) -> None:
        """Until the alarm goes off (at once if it went off since the last wait)."""
        await self._rang.wait()
        self._rang.clear()

    def cancel(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
        self._at = self._pending = None


async def sleep(clock: Clock, seconds: float) -> None:
    """asyncio.sleep on the injected clock."""
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def wake() -> None:
        if not done.done():
            done.set_result(None)

    pending = clock.call_later(seconds, wake)
    try:
        await done
    finally:
        pending.cancel()
