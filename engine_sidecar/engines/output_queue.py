"""A bounded output channel with an explicit end, shared by the engines."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from engine_api.outputs import PROGRESS_EVERY_MS, Closed, EngineOutput, Progress
from engine_sidecar.engines.limits import OUTPUTS


class OutputChannel:
    def __init__(self, maxsize: int = OUTPUTS.value) -> None:
        self._queue: asyncio.Queue[EngineOutput | None] = asyncio.Queue(maxsize=maxsize)
        self._ended = False
        self._progress_ms = 0  # the last Progress reported

    async def put(self, item: EngineOutput) -> None:
        if self._ended:
            return
        await self._queue.put(item)
        if isinstance(item, Closed):
            self._ended = True

    async def progress(self, audio_ms: int) -> None:
        """Report the audio the engine has taken in (Progress), every PROGRESS_EVERY_MS of it."""
        if audio_ms - self._progress_ms >= PROGRESS_EVERY_MS:
            self._progress_ms = audio_ms
            await self.put(Progress(audio_ms))

    def end_now(self) -> None:
        """Abort: wake the reader without waiting for room."""
        self._ended = True
        while not self._queue.empty():
            self._queue.get_nowait()
        self._queue.put_nowait(None)

    async def __aiter__(self) -> AsyncIterator[EngineOutput]:
        while True:
            item = await self._queue.get()
            if item is None:
                return
            yield item
            if isinstance(item, Closed):
                return
