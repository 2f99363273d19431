"""Injected time, so watchdogs and timeouts can be tested without sleeping.

A clock tells the time and calls back at a later time; tests use a fake one that
moves only when told (tests/session/harness.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> Cancellable:
        """Call `callback` on the running event loop once `delay_s` has passed on this clock."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> Cancellable:
        return asyncio.get_running_loop().call_later(delay_s, callback)
