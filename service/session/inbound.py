"""The inbound half of a session: an attached client's requests → intake → the engine queue.

It reads one client stream at a time (a resumed stream continues where the last one
stopped) and says how the stream ended; what that means for the session is decided in
core.py. Nothing here waits on a timer.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Iterable
from enum import Enum

from .. import phrase_hints
from ..audio.nonspeech import NonSpeech
from ..audio.vad import SpeechBoundary
from ..clock import Clock
from ..config import Config
from ..events import (
    AudioIn,
    ClientInput,
    FinalizeIn,
    HintsUpdated,
    KeepAliveIn,
    Notice,
    PhraseHintsIn,
    SoundEvent,
    SpeechEvent,
)
from ..session_config import SessionConfig
from .engine_inputs import Close, EngineQueue, Flush, SetHints
from .intake import AudioIntake, Chunk
from .log import ResponseLog
from .stats import SessionStats
from .timers import SessionTimers


class StreamEnd(Enum):
    """How reading a client stream ended (errors are raised instead)."""

    HALF_CLOSED = "half_closed"  # the request stream ended: a half-close, or a client that vanished
    STOPPED = "stopped"  # stop() was called
    MAX_DURATION = "max_duration"  # the audio reached the session's duration cap


class Inbound:
    def __init__(
        self,
        cfg: SessionConfig,
        server: Config,
        clock: Clock,
        queue: EngineQueue,
        log: ResponseLog,
        stats: SessionStats,
        timers: SessionTimers,
    ) -> None:
        self.intake = AudioIntake(cfg, server)
        self._clock = clock
        self._queue = queue
        self._log = log
        self._stats = stats
        self._timers = timers
        self._flush_marker = 0
        self._unqueued: deque[Chunk | SpeechBoundary | NonSpeech | Flush | SetHints | Close] = deque()  # see _forward
        self._forwarding = asyncio.Lock()
        self._stopped = False
        self._at_endpoint = False  # stop once the utterance in progress has ended (a drain)
        self._reader: asyncio.Task[StreamEnd] | None = None
        self._awaiting_client = False
        self.hints_ignored_by = ""  # the engine's name when it does not use phrase hints (core.py sets it)

    async def read(self, inputs: AsyncIterator[ClientInput]) -> StreamEnd:
        """Read a client stream into the engine queue until it ends, reaches the cap, or stop() is called.

        Raises StreamError for a request the session cannot take, and whatever else reading raised.
        """
        reader = self._reader = asyncio.ensure_future(self._read(inputs))
        try:
            await asyncio.wait([reader])
        finally:  # cancelled (the client vanished): the reader goes too, whatever it was doing
            self._reader = None
            if not reader.done():
                reader.cancel()
                await asyncio.wait([reader])
        if reader.cancelled():  # stop() interrupted its wait for the client
            return StreamEnd.STOPPED
        return reader.result()

    def stop(self) -> None:
        """Read no more client input: the reader stops at once if it is waiting for the client, else
        after the request it is handing on (its audio is acknowledged already)."""
        self._stopped = True
        if self._reader is not None and self._awaiting_client:
            self._reader.cancel()

    def stop_at_endpoint(self) -> None:
        """Read client input until the utterance in progress ends (its endpoint is handed on), then stop."""
        self._at_endpoint = True
        if not self.intake.in_speech:
            self.stop()

    async def _read(self, inputs: AsyncIterator[ClientInput]) -> StreamEnd:
        receive = inputs.__anext__  # per message: no anext() wrapper, no coroutine for plain audio
        while not self._stopped:
            self._awaiting_client = True
            try:
                msg = await receive()
            except StopAsyncIteration:
                return StreamEnd.HALF_CLOSED
            finally:
                self._awaiting_client = False
            self._timers.activity()
            if isinstance(msg, AudioIn):
                outputs, at_cap = self.intake.push(msg.data, self._clock.monotonic())
                if outputs or self._unqueued:  # most 20 ms messages complete no chunk: nothing to hand on
                    await self._forward(outputs)
                if at_cap:
                    return StreamEnd.MAX_DURATION
                if self._at_endpoint and not self.intake.in_speech:
                    return StreamEnd.STOPPED
            elif isinstance(msg, KeepAliveIn) or not self.intake.take_control():  # else resent, applied before
                continue
            elif isinstance(msg, FinalizeIn):
                await self._forward([*self.intake.cut(self._clock.monotonic()), self._next_flush()])
            else:
                await self._replace_hints(msg)
        return StreamEnd.STOPPED

    async def _replace_hints(self, msg: PhraseHintsIn) -> None:
        """Hand new hints to the engine after the audio before them, and answer the client."""
        if msg.rejected:
            self._log.append(Notice(phrase_hints.REJECTED_WARNING, f"phrase hints unchanged: {msg.rejected}"))
            return
        await self._forward([SetHints(msg.hints)])
        self._log.append(HintsUpdated(msg.hints, self.intake.received_ms))
        if msg.hints and self.hints_ignored_by:
            said = f"the {self.hints_ignored_by} engine does not use phrase hints: {len(msg.hints)} ignored"
            self._log.append(Notice(phrase_hints.IGNORED_WARNING, said))

    async def finish(self) -> None:
        """The end of input: the intake's last audio, then Close."""
        await self._forward([*self.intake.finish(self._clock.monotonic()), Close()])

    async def _forward(self, outputs: Iterable[Chunk | SpeechBoundary | NonSpeech | Flush | SetHints | Close]) -> None:
        """Hand intake outputs to the engine queue, in order.

        Each waits in _unqueued until it is in the queue: the intake has already counted its audio as
        received (the ack a resume skips by), so a reader cancelled while the queue is full (its client
        vanished) must not lose it; the next one to forward (a resumed stream, the end of input) sends it first.
        """
        self._unqueued.extend(outputs)
        if not self._forwarding.locked() and self._forward_now():
            return  # all in without waiting (the usual case): no lock round trip
        async with self._forwarding:  # one forwarder at a time, or the head of _unqueued could go twice
            while not self._forward_now():  # the queue is full: the client waits for the engine
                head = self._unqueued[0]
                assert not isinstance(head, SpeechBoundary | NonSpeech)  # _forward_now logged or turned it
                self._timers.held_back(True)  # that is not idleness
                try:
                    await self._queue.put(head)
                finally:
                    self._timers.held_back(False)
                self._unqueued.popleft()

    def _forward_now(self) -> bool:
        """Move _unqueued into the queue for as long as it has room, with no await (so no other forwarder
        can interleave); True when _unqueued is empty. Called only by the one forwarder (or none) at work."""
        while self._unqueued:
            item = self._unqueued[0]
            if isinstance(item, NonSpeech):
                self._log.append(SoundEvent(item.sound, item.offset_ms, item.digit))
                self._unqueued.popleft()
                continue
            if isinstance(item, SpeechBoundary):
                self._log.append(SpeechEvent(item.started, item.offset_ms))
                if item.started:
                    self._unqueued.popleft()
                    continue
                self._stats.speech_ended()
                self._unqueued[0] = item = self._next_flush()  # an endpoint flushes the engine
            if self._queue.full():
                return False
            self._queue.put_nowait(item)
            self._unqueued.popleft()
        return True

    def _next_flush(self) -> Flush:
        self._flush_marker += 1
        return Flush(self._flush_marker)
