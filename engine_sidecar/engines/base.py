"""What the simple engines' sessions share (fake, sphinx): outputs through an OutputChannel, close = flush
then Closed, and the engine's count of active sessions given back exactly once (close or abort)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from engine_api.outputs import Closed, EngineOutput
from engine_sidecar.engines.engine import EngineCounters
from engine_sidecar.engines.output_queue import OutputChannel


class ChannelSession:
    """An EngineSession but for push_audio and flush, which the engine's own session class adds."""

    def __init__(self, counters: EngineCounters) -> None:
        self._counters = counters
        self._out = OutputChannel()
        self._audio_ms = 0  # audio pushed so far
        self._released = False

    def outputs(self) -> AsyncIterator[EngineOutput]:
        return self._out.__aiter__()

    async def flush(self, marker: int) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        await self.flush(marker=0)
        self._release()
        await self._out.put(Closed(audio_ms=self._audio_ms))

    async def abort(self) -> None:
        self._release()
        self._out.end_now()

    def _release(self) -> None:
        if not self._released:
            self._released = True
            self._counters.sessions_active -= 1
