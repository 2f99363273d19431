"""A voxgate session on Voxtral: a chain of engine requests (rollover), time-stamped deltas,
deferred flush acknowledgements, backpressure and the watchdog.

Flush: Voxtral has no utterance to close; it speaks D ms after the audio.
flush(marker) therefore never injects padding mid-session (that would shift
every later timestamp and disturb the model's state): it records the audio
time A pushed so far and Flushed(marker, A) is emitted as soon as tokens cover
audio up to A, i.e. once about D + one frame more audio has been fed, or at
close, where the right padding covers everything.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import structlog

from engine_api.audio import BYTES_PER_MS, BYTES_PER_SAMPLE, SAMPLE_RATE_HZ
from engine_api.outputs import Closed, Delta, Diagnostic, DiagnosticKind, EngineOutput, Flushed
from engine_api.phrases import PhraseHint
from engine_api.status import SessionStat
from engine_sidecar.engines.output_queue import OutputChannel
from engine_sidecar.engines.voxtral.context import EngineContext
from engine_sidecar.engines.voxtral.reanchor.tripwire import Unacknowledged
from engine_sidecar.engines.voxtral.reanchor_link import PositionChoice, ReanchorEvent, StreamListener
from engine_sidecar.engines.voxtral.stream import RequestStream
from engine_sidecar.engines.voxtral.watchdog import FREEZE, RUT, Watchdog

log = structlog.get_logger("voxtral")
RATE_WINDOW_S = 2.0
REANCHOR_FAILED = DiagnosticKind.REANCHOR_FAILED
COUNTERS = {
    DiagnosticKind.ROLLOVER: "rollovers",
    RUT: "rut_recoveries",
    FREEZE: "freeze_recoveries",
    DiagnosticKind.WARNING: "early_request_ends",
    REANCHOR_FAILED: "reanchor_failed_sessions",
}


class VoxtralSession:
    def __init__(self, ctx: EngineContext, session_id: str, hints: tuple[PhraseHint, ...] = ()) -> None:
        self._ctx = ctx
        self._id = session_id
        self._phrases = ctx.phrases(hints)
        self._g = ctx.geometry
        self._out = OutputChannel()
        self._pushed_samples = 0
        self._covered_ms = 0  # session audio that every emitted token now accounts for
        self._flushes: deque[tuple[int, int]] = deque()  # (marker, audio_ms) not yet acknowledged
        self._pending_ids: list[int] = []  # textless non-blank tokens, carried into the next delta
        self._pending_start_ms = 0
        self._notes: deque[Diagnostic] = deque()  # re-anchor events, emitted in order with the tokens
        self._progress_rate = 1.0  # audio ms transcribed per wall ms lately (admission's headroom signal)
        self._rate_mark = (ctx.clock(), 0)
        self.reanchors = 0
        self._mode = ctx.position_mode  # a failed re-anchor turns this session (only) to rollover
        self._policy = ctx.rollover
        self._progress = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._error: BaseException | None = None
        self.released = False
        self._closing = False
        self._reader_slow = False  # a driver waits for room in the output channel: not an engine freeze
        self._dog = Watchdog(ctx.options.rut_blank_frames, ctx.options.stall_timeout_s, self._g.frame_ms, ctx.clock)
        self._stream = self._start_stream(0, None, None)

    def stat(self) -> SessionStat:
        stream = self._stream
        clock = self._g.prompt_tokens + stream.tokens - stream.shifted
        return SessionStat(self._id, self._pushed_ms(), self.reanchors, clock, self._mode.mode)

    # -- EngineSession -------------------------------------------------------

    def outputs(self) -> AsyncIterator[EngineOutput]:
        return self._out.__aiter__()

    async def push_audio(self, pcm16: bytes, speech: bool) -> None:
        self._raise_if_failed()
        if self._phrases is not None:
            self._phrases.heard(speech)
        self._dog.on_audio(len(pcm16) // BYTES_PER_MS, speech)
        if (kind := self._dog.check(self._excess_backlog_ms())) is not None and not self._reader_slow:
            await self._recover(kind)
        while pcm16:
            n = len(pcm16) // BYTES_PER_SAMPLE
            head = self._policy.split(self._stream.samples, n, speech)
            if head is None:
                self._feed(pcm16)
                break
            self._feed(pcm16[: head * BYTES_PER_SAMPLE])
            pcm16 = pcm16[head * BYTES_PER_SAMPLE :]
            self._roll_over(
                DiagnosticKind.ROLLOVER,
                f"session moved to a fresh engine request at "
                f"{self._pushed_ms()} ms (position budget; max_model_len "
                f"{self._ctx.options.max_model_len})",
            )
        await self._wait_for_backlog()

    async def flush(self, marker: int) -> None:
        self._raise_if_failed()
        if self._phrases is not None:
            self._phrases.utterance_ended()
        self._flushes.append((marker, self._pushed_ms()))
        await self._ack_flushes()

    async def set_phrase_hints(self, hints: tuple[PhraseHint, ...]) -> None:
        if self._phrases is not None:  # else the engine's info says NONE and the service warns the client
            self._phrases.replace(hints)

    async def close(self) -> None:
        self._closing = True
        self._stream.end()
        try:
            while not all(task.done() for task in self._tasks):  # a rollover may add one meanwhile
                await asyncio.gather(*self._tasks)
        finally:
            self._release()
        self._raise_if_failed()
        await self._emit_notes()
        self._covered_ms = self._pushed_ms()
        await self._ack_flushes()
        await self._out.put(Flushed(marker=0, audio_ms=self._pushed_ms()))
        await self._out.put(Closed(audio_ms=self._pushed_ms()))

    async def abort(self) -> None:
        await self._cancel_streams()
        for stream_id in [r for r in self._ctx.reanchor_listeners if r.startswith(f"voxgate-{self._id}-")]:
            del self._ctx.reanchor_listeners[stream_id]
        self._release()
        self._out.end_now()

    # -- requests ------------------------------------------------------------

    def _start_stream(
        self, offset_ms: int, predecessor: RequestStream | None, announce: Diagnostic | None
    ) -> RequestStream:
        bias = self._ctx.probes.blank_logit_bias
        reanchor = self._mode.reanchor
        stream = RequestStream(
            self._ctx.llm,
            self._ctx.model_cls,
            self._id,
            offset_ms,
            predecessor,
            {self._g.blank_token_id: bias} if bias else None,
            reanchor=reanchor,
            prefix=self._ctx.request_prefix,
            render=self._ctx.render,
            direct_tasks=self._ctx.direct_tasks,
            pieces=self._ctx.token_pieces,
            phrases=self._phrases,
        )
        if reanchor:
            self._ctx.reanchor_listeners[stream.request_id] = StreamListener(
                lambda event: self._on_reanchor(stream, event), lambda failure: self._reanchor_failed(stream, failure)
            )

        async def on_start() -> None:
            # The previous request is finished: all it will ever say is out.
            if predecessor is not None:
                await self._finished(predecessor)
            self._dog.reset()
            if announce is not None:
                await self._out.put(announce)

        self._tasks.append(asyncio.create_task(self._drive(stream, on_start)))
        return stream

    async def _drive(self, stream: RequestStream, on_start: Callable[[], Any]) -> None:
        try:
            await stream.run(self._on_token, on_start)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail(exc)
            return
        finally:
            self._progress.set()
        if self._ctx.flush_reanchor is not None and stream.request_id in self._ctx.reanchor_listeners:
            await self._ctx.flush_reanchor()  # the request's last events, before its last words are out
        self._ctx.reanchor_listeners.pop(stream.request_id, None)
        await self._finished(stream)
        if not stream.ended and stream is self._stream and not self._closing:
            # vLLM finished the request on its own (it stops at max_model_len): never drop audio silently.
            log.warning("engine_request_ended_early", session_id=self._id, request_id=stream.request_id)
            self._roll_over(DiagnosticKind.WARNING, "the engine ended a request early; continuing on a fresh one")

    async def _finished(self, stream: RequestStream) -> None:
        self._covered_ms = max(self._covered_ms, stream.offset_ms + stream.audio_ms)
        await self._ack_flushes()

    def _roll_over(self, kind: DiagnosticKind, message: str) -> None:
        """Move to a fresh engine request (synchronous: nothing can interleave with the switch)."""
        old = self._stream
        old.end()
        at_ms = old.offset_ms + old.audio_ms
        self._ctx.count(COUNTERS[kind])
        log.info("session_rollover", session_id=self._id, kind=kind, at_ms=at_ms)
        self._pending_ids = []
        self._stream = self._start_stream(at_ms, old, Diagnostic(kind=kind, message=message, at_ms=at_ms))

    async def _recover(self, kind: DiagnosticKind) -> None:
        if kind == FREEZE:
            # A frozen request will not deliver its right padding either: abort it and move on.
            old = self._stream
            await self._cancel_streams(only=self._tasks[-1:])
            old.done.set()
            self._covered_ms = max(self._covered_ms, old.offset_ms + old.audio_ms)
            await self._ack_flushes()
        self._dog.reset()
        self._roll_over(
            kind,
            "no output while audio was fed; engine request restarted"
            if kind == FREEZE
            else f"blank-token rut over speech (> {self._ctx.options.rut_blank_frames} frames); "
            "engine request restarted",
        )

    async def _cancel_streams(self, only: list[asyncio.Task[None]] | None = None) -> None:
        tasks = self._tasks if only is None else only
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, 10)

    # -- outputs -------------------------------------------------------------

    def _event_ms(self, stream: RequestStream, clock: int) -> tuple[int, int]:
        """(absolute position, session audio ms) of an event that left `stream` at `clock` (after the shift)."""
        position = clock + stream.shifted
        return position, stream.offset_ms + max(
            0, min(self._g.token_end_ms(position - self._g.prompt_tokens), stream.audio_ms)
        )

    def _on_reanchor(self, stream: RequestStream, event: ReanchorEvent) -> None:
        stream.shifted += int(event["tokens"])
        self.reanchors += 1
        position, at_ms = self._event_ms(stream, int(event["clock"]))
        self._notes.append(
            Diagnostic(
                kind=DiagnosticKind.REANCHOR,
                at_ms=at_ms,
                message=f"position clock shifted down by {event['tokens']} to {event['clock']} "
                f"(re-anchor {event['count']} of this request, absolute position {position}, "
                f"keys rotated in {event['rotate_ms']:.2f} ms; {event['blocks']} KV blocks live)",
            )
        )

    def _reanchor_failed(self, stream: RequestStream, failure: Unacknowledged) -> None:
        """The tripwire: a shift of this session that a worker rank did not apply. Its keys no longer match its
        clock, so re-anchoring ends for the session, loudly: it leaves that request at once and rolls over from
        now on (the log line and the engine counter come from the link)."""
        stream.shifted += failure.tokens  # the scheduler's clock did move
        self._ctx.reanchor_listeners.pop(stream.request_id, None)  # that request's later news changes nothing
        _, at_ms = self._event_ms(stream, failure.clock)
        what = failure.describe()
        self._mode = PositionChoice.rollover(f"re-anchoring ended at {at_ms} ms: {what}")
        if self._ctx.fallback_rollover is not None:
            self._policy = self._ctx.fallback_rollover
        message = (
            f"re-anchoring failed at {at_ms} ms: {what}. The transcript from {at_ms} ms to the end of this "
            "engine request may be wrong; re-anchoring ends for this session, which continues on a fresh "
            "engine request and rolls over from now on"
        )
        log.error(
            "session_reanchor_failed",
            session_id=self._id,
            request_id=stream.request_id,
            at_ms=at_ms,
            seq=failure.seq,
            missing_ranks=list(failure.missing_ranks),
        )
        if stream is self._stream and not self._closing and not self.released:
            self._roll_over(REANCHOR_FAILED, message)
        else:  # that request is over already: say so with the next outputs
            self._ctx.count(COUNTERS[REANCHOR_FAILED])
            self._notes.append(Diagnostic(kind=REANCHOR_FAILED, message=message, at_ms=at_ms))

    async def _emit_notes(self) -> None:
        while self._notes:
            await self._out.put(self._notes.popleft())

    async def _on_token(self, stream: RequestStream, k: int, token_id: int, text: str) -> None:
        await self._emit_notes()
        blank = token_id == self._g.blank_token_id
        self._dog.on_token(blank)
        start, end = self._g.token_span_ms(k, stream.offset_ms, stream.audio_ms)
        if text or self._ctx.probes.emit_empty_deltas:
            ids = (*self._pending_ids, token_id)
            if self._pending_ids:  # a word whose first tokens had no text of their own starts there
                start = self._pending_start_ms
            self._pending_ids = []
            self._reader_slow = True
            await self._out.put(Delta(text=text, start_ms=start, end_ms=end, token_ids=ids))
            self._reader_slow = False
        elif not blank:
            if not self._pending_ids:
                self._pending_start_ms = start
            self._pending_ids.append(token_id)
        self._covered_ms = max(self._covered_ms, end)
        self._note_progress()
        await self._ack_flushes()
        self._reader_slow = True
        await self._out.progress(self._taken_ms())
        self._reader_slow = False
        self._progress.set()

    async def _ack_flushes(self) -> None:
        while self._flushes and self._flushes[0][1] <= self._covered_ms:
            marker, audio_ms = self._flushes.popleft()
            await self._out.put(Flushed(marker=marker, audio_ms=audio_ms))

    # -- backpressure and failures -------------------------------------------

    def _feed(self, pcm16: bytes) -> None:
        self._stream.feed(pcm16)
        self._pushed_samples += len(pcm16) // BYTES_PER_SAMPLE

    def _pushed_ms(self) -> int:
        return self._pushed_samples * 1000 // SAMPLE_RATE_HZ

    def lag_ms(self) -> int:
        """How far this session falls behind real time: its transcript lags its audio beyond the model's own
        delay *and* advances slower than real time. A client sending faster than real time builds a backlog
        that the engine works off faster than real time: that is not a lack of headroom."""
        if self.released or self._progress_rate >= 1.0:
            return 0
        return max(0, self._excess_backlog_ms())

    def _note_progress(self) -> None:
        """Audio ms transcribed per wall ms, over windows of RATE_WINDOW_S."""
        now = self._ctx.clock()
        if now - self._rate_mark[0] >= RATE_WINDOW_S:
            elapsed_ms = (now - self._rate_mark[0]) * 1000
            self._progress_rate = (self._covered_ms - self._rate_mark[1]) / elapsed_ms
            self._rate_mark = (now, self._covered_ms)

    def _taken_ms(self) -> int:
        """Audio the model has taken in: its tokens cover all of it but its own delay and the frame in the making;
        the rest waits for more audio (or close's right padding), not for the engine."""
        return min(self._pushed_ms(), self._covered_ms + self._g.delay_ms + 2 * self._g.frame_ms)

    def _excess_backlog_ms(self) -> int:
        """Audio fed beyond what the model's own delay and one frame explain."""
        return self._pushed_ms() - self._covered_ms - self._g.delay_ms - 2 * self._g.frame_ms

    async def _wait_for_backlog(self) -> None:
        limit = self._ctx.options.max_backlog_ms
        while self._pushed_ms() - self._covered_ms > limit and self._error is None:
            self._progress.clear()
            timeout = self._ctx.options.stall_timeout_s or None
            try:
                await asyncio.wait_for(self._progress.wait(), timeout)
            except TimeoutError:
                if not self._reader_slow:
                    await self._recover(FREEZE)
        self._raise_if_failed()

    def _fail(self, exc: BaseException) -> None:
        self._error = exc
        self._progress.set()
        self._ctx.on_request_error(exc)

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"voxtral engine request failed: {self._error!r}") from self._error

    def _release(self) -> None:
        if not self.released:
            self.released = True
            self._ctx.counters.sessions_active -= 1
