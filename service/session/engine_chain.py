"""The engine half of a session: a chain of engine streams fed from the engine queue.

One stream at a time runs as three tasks, like livekit agents' RecognizeStream (send, receive, and
here a watchdog on the clock): the writer takes the engine queue to the stream, the receiver turns
its outputs into results, the watchdog waits for the freeze watch's and the final flush's deadlines.
The first to finish decides. Closed ends the chain. A lost stream or a frozen one is a seam: what
was heard is finalized (with a warning), a fresh stream is opened and the audio the engine had not
yet turned into text is replayed, so the transcript and its offsets continue.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import NoReturn

import grpc
import structlog

from engine_api.outputs import Closed, Delta, Flushed

from .. import errors, metrics, tracing
from ..clock import Clock
from ..config import Config
from ..events import EndReason, Notice
from .alarm import Alarm, sleep
from .engine_inputs import EngineQueue, Flush, SetHints
from .engine_source import (
    EngineFailed,
    EngineFull,
    EngineLost,
    EngineRequest,
    EngineSource,
    EngineStream,
    EngineUnavailable,
    StreamInfo,
)
from .freeze import FreezeWatch, Frozen
from .intake import Chunk
from .log import ResponseLog
from .replay import ReplayBuffer
from .results import Results

log = structlog.get_logger("session")
CLOSING_RESETS = 2  # engine resets tried when the final-flush deadline passes with speech unanswered
RECOVERY_RETRY_S = 0.5  # between attempts to reopen a session on a restarting engine


@dataclass(frozen=True)
class EngineDone:
    """The engine said its last: Closed, or the final-flush deadline passed without it (`finals_late`)."""

    finals_late: bool = False


@dataclass(frozen=True)
class EngineGone:
    """The engine cannot go on with the session, which ends with this reason and error."""

    reason: EndReason
    error: errors.StreamError
    message: str


ChainEnd = EngineDone | EngineGone


class EngineChain:
    def __init__(
        self,
        request: EngineRequest,
        server: Config,
        engines: EngineSource,
        clock: Clock,
        queue: EngineQueue,
        log: ResponseLog,
        results: Results,
    ) -> None:
        self.restarts = 0
        self.freeze_recoveries = 0
        self.written_ms = 0  # session time up to which audio went to the engine
        self.finalized_ms = 0  # session time up to which the engine's results are final (Flushed, Closed)
        self.write_lag_ms = 0  # how long the last chunk waited in the engine queue
        self._request = request
        self._server = server
        self._engines = engines
        self._clock = clock
        self._queue = queue
        self._log = log
        self._results = results
        self._replay = ReplayBuffer(server.max_replay_ms)  # sent to the engine, not yet covered by its text
        self._freeze = FreezeWatch(clock, server.freeze_timeout_s)
        self._alarm = Alarm(clock)  # the watchdog's: the freeze watch's and the final flush's deadlines
        self._stream: EngineStream | None = None
        self._resend: list[Chunk] = []  # replay for the next stream, sent by its writer
        self._close_taken = False  # a writer took Close from the queue: a fresh stream is told to close too
        self._flush_deadline: float | None = None  # input ended: the engine's last results are due by then
        self._closing_resets = 0

    async def open(self) -> StreamInfo:
        """Open the first stream, on an engine ready now; UNAVAILABLE if no engine can take the session."""
        self._stream = await self._open(base_ms=0, wait_s=0.0)
        return self._stream.info

    def closing(self) -> None:
        """Input has ended (Close is on its way): the engine has final_flush_timeout_s for its last results,
        renewed while it makes progress."""
        self._flush_deadline = self._clock.monotonic() + self._server.final_flush_timeout_s
        self._alarm.wake_by(self._flush_deadline)

    async def run(self) -> ChainEnd:
        """Drive streams until the engine says its last or cannot go on."""
        assert self._stream is not None, "open() first"
        try:
            while True:
                try:
                    return await self._run_stream(self._stream)
                except EngineFailed as exc:
                    return EngineGone(
                        EndReason.ERROR,
                        errors.StreamError(
                            grpc.StatusCode.INTERNAL, errors.ENGINE_ERROR, f"the engine failed on this session: {exc}"
                        ),
                        "the engine failed on this session",
                    )
                except (EngineLost, Frozen) as exc:
                    await self._stream.cancel()
                    if (gone := await self._reconnect(exc)) is not None:
                        return gone
        finally:
            await self.cancel()

    async def cancel(self) -> None:
        """Drop the current stream (the engine aborts its session)."""
        if self._stream is not None:
            await self._stream.cancel()

    async def _open(self, base_ms: int, wait_s: float, failed: EngineStream | None = None) -> EngineStream:
        retry = self._server.retry_delay_s
        try:
            return await self._engines.open(self._request, base_ms, wait_s, failed)
        except EngineUnavailable:
            raise errors.unavailable(
                errors.ENGINE_UNAVAILABLE, "speech engine is starting or restarting", retry
            ) from None
        except EngineFull as exc:
            raise errors.unavailable(errors.CAPACITY, f"engine has no free slot: {exc}", retry) from exc
        except EngineLost as exc:
            raise errors.unavailable(
                errors.ENGINE_UNAVAILABLE, f"engine could not open a session: {exc}", retry
            ) from exc

    async def _run_stream(self, stream: EngineStream) -> EngineDone:
        """One stream until Closed or the final flush gives up; raises EngineLost, EngineFailed or Frozen."""
        writer = asyncio.ensure_future(self._write(stream))
        receiver = asyncio.ensure_future(self._receive(stream))
        watchdog = asyncio.ensure_future(self._watchdog())
        tasks = (writer, receiver, watchdog)
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)
        if not receiver.cancelled() and receiver.exception() is None:
            return receiver.result()  # Closed: the engine said its last, whatever broke meanwhile
        if not writer.cancelled() and (failure := writer.exception()) is not None:
            raise failure
        for task in (receiver, watchdog):
            if not task.cancelled():
                return task.result()
        raise EngineLost("the writer stopped")  # it only stops by raising: not reached

    async def _write(self, stream: EngineStream) -> NoReturn:
        resend, self._resend = self._resend, []
        # Audio counts as given to the engine before its write: a write held by the engine's flow control is
        # audio the engine has not taken in (the freeze watch judges that).
        for chunk in resend:
            self._freeze.sent(chunk)
            self._tell_watchdog()
            await stream.send_audio(chunk.pcm16, chunk.speech)
        if self._close_taken:
            self._freeze.close_sent()
            self._tell_watchdog()
            await stream.send_close()
        while True:
            item = await self._queue.get()
            if isinstance(item, Chunk):
                self._replay.written(item)
                self._freeze.sent(item)
                self._tell_watchdog()
                await stream.send_audio(item.pcm16, item.speech)
                self.written_ms = item.end_ms
                lag_s = self._clock.monotonic() - item.received_at
                self.write_lag_ms = int(lag_s * 1000)
                metrics.LAG.observe(lag_s)
            elif isinstance(item, Flush):
                await stream.send_flush(item.marker)
            elif isinstance(item, SetHints):
                self._request = replace(self._request, phrase_hints=item.hints)  # a fresh stream opens with them
                await stream.send_phrase_hints(item.hints)
            else:
                self._close_taken = True
                self._freeze.close_sent()
                self._tell_watchdog()
                await stream.send_close()

    async def _receive(self, stream: EngineStream) -> EngineDone:
        while True:
            out = await stream.next_output()
            self._freeze.answered(out)
            if self._flush_deadline is not None:  # the engine is making progress: keep waiting
                self._flush_deadline = self._clock.monotonic() + self._server.final_flush_timeout_s
            if isinstance(out, Delta):
                self._replay.covered(out.end_ms)
            elif isinstance(out, Flushed):
                self._replay.covered(out.audio_ms)
                self.finalized_ms = max(self.finalized_ms, out.audio_ms)
            elif isinstance(out, Closed):
                self.finalized_ms = self.written_ms
            self._results.take(out)
            if isinstance(out, Closed):
                return EngineDone()

    async def _watchdog(self) -> EngineDone:
        """Raise Frozen when the freeze watch fires; give up on the finals when the final flush is late."""
        while True:
            for deadline in (self._freeze.deadline(), self._flush_deadline):
                if deadline is not None:
                    self._alarm.wake_by(deadline)
            await self._alarm.wait()
            self._freeze.check()
            if self._flush_deadline is not None and self._clock.monotonic() >= self._flush_deadline:
                if self._freeze.unanswered_since is not None and self._closing_resets < CLOSING_RESETS:
                    # Closing and the engine has not answered (Closed is owed): treat it as frozen
                    # now rather than give up on the finals (freeze_timeout_s may be longer).
                    self._closing_resets += 1
                    self._freeze.disarm()
                    raise Frozen("no final results within final_flush_timeout_s")
                self._results.finalize()  # what the client saw as interim text still becomes final
                return EngineDone(finals_late=True)

    def _tell_watchdog(self) -> None:
        """The freeze watch may have armed: its deadline may be the watchdog's next."""
        if (deadline := self._freeze.deadline()) is not None:
            self._alarm.wake_by(deadline)

    async def _reconnect(self, cause: Exception) -> EngineGone | None:
        """Seam: finalize what was heard, open a fresh engine session, replay unheard audio."""
        frozen = isinstance(cause, Frozen)
        if frozen:
            self.freeze_recoveries += 1
        else:
            self.restarts += 1
        metrics.ENGINE_EVENTS.labels("engine_reset" if frozen else "engine_restarted").inc()
        tracing.session_event(
            self._request.session_id, "engine_reset" if frozen else "engine_restarted", {"audio_ms": self.written_ms}
        )
        self._results.finalize()
        # A lost engine's sessions reopen on whichever engine has room (the restarted one or, with several
        # engines, another), so the notice says what happened to this session, not which engine it lands on.
        what = "engine session froze; it was reset" if frozen else "the speech engine serving this session stopped"
        log.warning("engine_seam", cause=str(cause), replay_ms=self._replay.duration_ms())
        self._log.append(
            Notice(
                "ENGINE_RESET" if frozen else "ENGINE_RESTARTED",
                f"{what}; the current utterance was closed and audio since then is replayed to a fresh engine session",
            )
        )
        base = self._replay.start_ms(default_ms=self.written_ms)
        # A frozen session's sidecar is alive: its stream is not stale, do not wait for it to go down.
        failed = None if frozen else self._stream
        recovery_s = self._server.engine_recovery_timeout_s
        deadline = self._clock.monotonic() + recovery_s
        attempts = int(recovery_s / RECOVERY_RETRY_S) + 1
        while True:
            try:
                self._stream = await self._open(base, max(deadline - self._clock.monotonic(), 0.0), failed)
                break
            except errors.StreamError as exc:
                attempts -= 1
                if attempts <= 0 or self._clock.monotonic() >= deadline:
                    return EngineGone(
                        EndReason.ENGINE_LOST,
                        errors.unavailable(
                            errors.ENGINE_UNAVAILABLE,
                            f"the speech engine was lost mid-session: {exc}",
                            self._server.retry_delay_s,
                        ),
                        "the speech engine stopped; reconnect to continue",
                    )
                # The sidecar may be dead but not yet noticed (its stub still looks ready), or restarting:
                # keep trying until the recovery deadline rather than give up on the first refusal.
                log.info("engine_reopen_retry", error=str(exc))
                await sleep(self._clock, RECOVERY_RETRY_S)
        # The writer replays it first, under the freeze watch: a fresh engine session may stall too.
        self._freeze.restart(base)
        self._resend = self._replay.snapshot()
        if self._flush_deadline is not None:  # the fresh engine gets the whole flush timeout
            self._flush_deadline = self._clock.monotonic() + self._server.final_flush_timeout_s
        return None
