"""What the simple engines' sessions share (fake, sphinx, whisper): outputs through an OutputChannel, close = flush
then Closed, and the engine's count of active sessions given back exactly once (close or abort)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

from engine_api.outputs import Closed, EngineOutput, Progress
from engine_api.phrases import PhraseHint
from engine_sidecar.engines.engine import EngineCounters
from engine_sidecar.engines.output_queue import OutputChannel

T = TypeVar("T")

# A final pass over a long utterance can take seconds of CPU (more on a loaded box, or behind other decodes):
# while it runs the session says it is alive (Progress) so the service's final-flush deadline, which counts
# from the engine's last word, waits for it; never longer than FINAL_PASS_LIMIT_S, so a decoder that hangs
# still meets the deadline.
FINAL_PASS_HEARTBEAT_S = 2.0
FINAL_PASS_LIMIT_S = 120.0


class ChannelSession:
    """An EngineSession but for push_audio and flush, which the engine's own session class adds. Phrase hints
    replaced mid-call wait for the utterance in progress to end (_in_utterance, _utterance_ended)."""

    def __init__(self, counters: EngineCounters) -> None:
        self._counters = counters
        self._out = OutputChannel()
        self._audio_ms = 0  # audio pushed so far
        self._released = False
        self._next_hints: tuple[PhraseHint, ...] | None = None  # waiting for the utterance in progress to end
        self.final_pass_heartbeat_s = FINAL_PASS_HEARTBEAT_S
        self.final_pass_limit_s = FINAL_PASS_LIMIT_S

    def outputs(self) -> AsyncIterator[EngineOutput]:
        return self._out.__aiter__()

    async def flush(self, marker: int) -> None:
        raise NotImplementedError

    async def set_phrase_hints(self, hints: tuple[PhraseHint, ...]) -> None:
        if self._in_utterance():
            self._next_hints = hints
        else:
            self._use_hints(hints)

    def _utterance_ended(self) -> None:
        """The engine's flush calls this once the utterance's results are out: hints that waited for it apply."""
        if self._next_hints is not None:
            hints, self._next_hints = self._next_hints, None
            self._use_hints(hints)

    def _in_utterance(self) -> bool:
        """Whether speech came since the last flush (an engine that uses hints says)."""
        return False

    def _use_hints(self, hints: tuple[PhraseHint, ...]) -> None:
        """Decode with these from now on; an engine that does not use hints (sphinx) ignores them."""

    async def _with_heartbeat(self, work: Awaitable[T]) -> T:
        """work's result, with a Progress every final_pass_heartbeat_s while it runs (at most
        final_pass_limit_s of them)."""
        task = asyncio.ensure_future(work)
        beats = int(self.final_pass_limit_s / self.final_pass_heartbeat_s)
        while beats > 0:
            done, _ = await asyncio.wait({task}, timeout=self.final_pass_heartbeat_s)
            if done:
                break
            beats -= 1
            await self._out.put(Progress(self._audio_ms))
        return await task

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
