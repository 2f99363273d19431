"""Starting a server that a stop signal may cut short: an engine still loading must not hold off SIGTERM.

Starting waits for every engine (minutes while a GPU loads weights, for ever if one hangs); an orchestrator's
SIGTERM meanwhile (a rolling update, a scale-down) must stop the start, not wait for it and then be SIGKILLed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any


async def start_unless_stopped(start: Coroutine[Any, Any, None], stop: asyncio.Event) -> bool:
    """Run `start` until it finishes (True) or `stop` is set first (False: `start` cancelled and its own cleanup
    awaited; the caller's shutdown stops what it had started). A failure of `start` is raised."""
    starting = asyncio.ensure_future(start)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        starting.cancel()
        stopping.cancel()
        raise
    stopping.cancel()
    if starting.done():
        starting.result()
        return True
    starting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await starting
    return False
