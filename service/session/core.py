"""One recognition session, independent of any single client stream or engine stream.

A client stream *attaches* to a session: its requests are consumed here and
its responses are read from the session's ResponseLog. If the client vanishes,
the session waits `resume_window_s` for it to come back with the resume token.
The engine side is a chain of EngineLinks: if the sidecar dies or a session
freezes, the current utterance is finalized (a seam, with a warning), a new
link is opened and the audio the engine had not yet turned into text is
replayed, so the transcript and its offsets continue.

Backpressure: audio waits for the engine in a bounded queue; when it is full
the client's stream is not read, and HTTP/2 flow control holds the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
import structlog

from engine_api.outputs import Closed, Delta, Diagnostic, Flushed, Revision
from engine_api.v1 import engine_pb2_grpc

from .. import errors, metrics, tracing
from ..audio.vad import SpeechBoundary
from ..clock import Clock
from ..config import Config
from ..events import AudioIn, ClientInput, Ended, EndReason, FinalizeIn, FlowReport, Notice, SpeechEvent, Started
from ..session_config import SessionConfig
from ..transcript import UtteranceAssembler
from .engine_link import EngineFailed, EngineFull, EngineLink, EngineLost
from .freeze import FreezeWatch, Frozen
from .intake import AudioIntake, Chunk
from .log import ResponseLog
from .replay import ReplayBuffer
from .stats import SessionStats
from .timers import SessionTimers

log = structlog.get_logger("session")
ENGINE_QUEUE_CHUNKS = 64  # 5 s of 80 ms chunks waiting for the engine, then the client is not read
ENGINE_OPEN_TIMEOUT_S = 30.0
WATCH_INTERVAL_S = 0.1
HALF_CLOSE_GRACE_S = 0.02  # end of the request stream → half-close, unless the RPC is cancelled meanwhile
CLOSING_RESETS = 2  # engine resets tried when the final-flush deadline passes with speech unanswered
RECOVERY_RETRY_S = 0.5  # between attempts to reopen a session on a restarting engine


class EngineSource(Protocol):
    async def wait_ready(self, timeout_s: float, failed: engine_pb2_grpc.EngineStub | None = None
                         ) -> engine_pb2_grpc.EngineStub | None: ...


@dataclass(frozen=True)
class _Flush:
    marker: int


@dataclass(frozen=True)
class _Close:
    pass


EngineInput = Chunk | _Flush | _Close


class Session:
    def __init__(self, session_id: str, cfg: SessionConfig, server: Config, engines: EngineSource,
                 clock: Clock, on_end: Callable[[Session], None]) -> None:
        self.session_id = session_id
        self.cfg = cfg
        self.resume_token = secrets.token_urlsafe(24)
        self.started: Started | None = None  # the first response, sent again (resumed) to a resuming stream
        self.log = ResponseLog()
        self.error: errors.StreamError | None = None
        self.engine_restarts = 0
        self.freeze_recoveries = 0
        self._server = server
        self._engines = engines
        self._clock = clock
        self._on_end = on_end
        self._intake = AudioIntake(cfg, server)
        self._assembler = UtteranceAssembler(session_id)
        self._queue: asyncio.Queue[EngineInput] = asyncio.Queue(maxsize=ENGINE_QUEUE_CHUNKS)
        self._replay = ReplayBuffer(server.max_replay_ms)  # sent to the engine, not yet covered by its text
        self._freeze = FreezeWatch(clock, server.freeze_timeout_s)
        self._stats = SessionStats(session_id, clock)
        self._resend: list[Chunk] = []  # replay for the next link, sent by its writer
        self._link: EngineLink | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._flush_marker = 0
        self._unqueued: deque[Chunk | SpeechBoundary | _Flush] = deque()  # see _forward
        self._forwarding = asyncio.Lock()
        self._input_open = True
        self._close_sent = False
        self._stop_input = asyncio.Event()
        self._consumer: asyncio.Task[Any] | None = None
        self._reading = False
        self._interrupted = False
        self._stop_reason = EndReason.CLIENT_END
        self._end_reason = EndReason.CLIENT_END
        self._end_message = ""
        self._close_deadline: float | None = None
        self._attached = False
        self._timers = SessionTimers(clock, cfg.idle_timeout_s, server.resume_window_s,
                                     cfg.flow_status_interval_s)
        self._closing_resets = 0
        self._written_ms = 0
        self._write_lag_ms = 0
        self.ended = False

    # -- lifecycle ---------------------------------------------------------

    async def start(self) -> Started:
        """Open the first engine link; UNAVAILABLE if no engine can take the session."""
        self._link = await self._open_link(base_ms=0, wait_s=0.0)
        self._spawn(self._drive_engine())
        self._spawn(self._watch())
        started = Started(self.session_id, self._link.engine, self._link.model, self.resume_token,
                          self._server.resume_window_s, position_mode=self._link.position_mode,
                          position_mode_reason=self._link.position_mode_reason,
                          interim_stability=self._link.interim_stability)
        self.log.append(started)
        self.started = started
        return started

    def _spawn(self, coro: object) -> None:
        task = asyncio.ensure_future(coro)  # type: ignore[call-overload]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _open_link(self, base_ms: int, wait_s: float, failed: EngineLink | None = None) -> EngineLink:
        stub = await self._engines.wait_ready(wait_s, failed.stub if failed else None)
        retry = self._server.retry_delay_s
        if stub is None:
            raise errors.unavailable(errors.ENGINE_UNAVAILABLE, "speech engine is starting or restarting", retry)
        link = EngineLink(stub, self.session_id, self.cfg.language_code, base_ms)
        try:
            await link.open(ENGINE_OPEN_TIMEOUT_S)
        except EngineFull as exc:
            raise errors.unavailable(errors.CAPACITY, f"engine has no free slot: {exc}", retry) from exc
        except EngineLost as exc:
            raise errors.unavailable(errors.ENGINE_UNAVAILABLE, f"engine could not open a session: {exc}",
                                     retry) from exc
        return link

    # -- client side -------------------------------------------------------

    def attach(self, resume_audio_bytes: int | None, resume_last_seq: int = 0) -> None:
        if self._attached:
            raise errors.StreamError(grpc.StatusCode.FAILED_PRECONDITION, errors.SESSION_ATTACHED,
                                     "the session is still attached to another stream")
        if resume_last_seq > self.log.last_seq:  # else responses up to it would be skipped, unseen
            raise errors.invalid_config("config.resume_last_seq",
                                        f"resume_last_seq {resume_last_seq} is beyond the last response "
                                        f"({self.log.last_seq}) of this session")
        if resume_audio_bytes is not None:
            self._intake.resume_from(resume_audio_bytes)
        self._attached = True
        self._timers.attached()

    @property
    def has_audio(self) -> bool:
        """Whether any client audio reached the session (on this or an earlier stream)."""
        return self._intake.bytes_in > 0

    def detach(self) -> None:
        """The client vanished without ending the session: wait for a resume."""
        self._attached = False
        if self._input_open:
            self._timers.detached()
            log.info("session_detached", window_s=self._server.resume_window_s)

    async def consume(self, inputs: AsyncIterator[ClientInput]) -> None:
        """Read the attached client's requests until it half-closes, errs, or input is stopped."""
        self._consumer = asyncio.current_task()
        try:
            while self._input_open and not self._stop_input.is_set():
                msg = await self._next_input(inputs)
                if msg is _STOPPED:
                    break  # drain, idle timeout, failure
                if msg is None:
                    # A client that vanishes (cancel, dropped connection) also ends its request stream,
                    # and its RPC is cancelled a moment later (run_session then cancels us and detaches
                    # the session for a resume). Give that a moment before taking this as a half-close.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stop_input.wait(), HALF_CLOSE_GRACE_S)
                    stopped = self._stop_input.is_set()
                    await self.finish_input(self._stop_reason if stopped else EndReason.CLIENT_END)
                    return
                assert not isinstance(msg, _Stopped)
                self._timers.activity()
                await self._accept(msg)
            if self._input_open:
                await self.finish_input(self._stop_reason)
        except errors.StreamError as exc:
            await self.finish_input(EndReason.ERROR, exc)
        except Exception as exc:  # a bug, not the client's doing: end with the finals and INTERNAL, never hang
            log.exception("session_input_failed")
            await self.finish_input(EndReason.ERROR, errors.internal(f"the server failed reading this stream: {exc!r}"))
        finally:
            self._consumer = None

    async def _next_input(self, inputs: AsyncIterator[ClientInput]) -> ClientInput | _Stopped | None:
        """The next request; _STOPPED if stop_input() interrupted the wait (no task per message: hot path)."""
        self._reading = True
        try:
            return await anext(inputs, None)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self._interrupted and task is not None:
                self._interrupted = False
                task.uncancel()
                return _STOPPED
            raise
        finally:
            self._reading = False

    def _interrupt_reader(self) -> None:
        """Wake consume() if it is waiting for the client; between messages it sees the stop flag."""
        if self._consumer is not None and self._reading and not self._interrupted:
            self._interrupted = True
            self._consumer.cancel()

    async def _accept(self, msg: ClientInput) -> None:
        now = self._clock.monotonic()
        if isinstance(msg, AudioIn):
            outputs, at_cap = self._intake.push(msg.data, now)
            await self._forward(outputs)
            if at_cap:
                await self.finish_input(EndReason.MAX_DURATION)
        elif isinstance(msg, FinalizeIn):
            if self._intake.skipping:
                return  # resent after a resume, from before audio we already have: it was applied then
            await self._forward([*self._intake.cut(now), self._next_flush()])

    async def _forward(self, outputs: Iterable[Chunk | SpeechBoundary | _Flush]) -> None:
        """Hand intake outputs to the engine queue, in order.

        Each waits in _unqueued until it is in the queue: the intake has already counted its audio as
        received (the ack a resume skips by), so a consumer cancelled while the queue is full (its client
        vanished) must not lose it; the next one to forward (a resumed stream, the end of input) sends it first.
        """
        async with self._forwarding:  # one forwarder at a time, or the head of _unqueued could go twice
            self._unqueued.extend(outputs)
            while self._unqueued:
                item = self._unqueued[0]
                if isinstance(item, SpeechBoundary):
                    self.log.append(SpeechEvent(item.started, item.offset_ms))
                    if item.started:
                        self._unqueued.popleft()
                        continue
                    self._stats.speech_ended()
                    self._unqueued[0] = item = self._next_flush()  # an endpoint flushes the engine
                await self._queue.put(item)
                self._unqueued.popleft()

    def _next_flush(self) -> _Flush:
        self._flush_marker += 1
        return _Flush(self._flush_marker)

    def stop_input(self, reason: EndReason) -> None:
        """Stop taking client input (drain, idle); the session then ends with its finals."""
        self._stop_reason = reason
        self._stop_input.set()
        self._interrupt_reader()
        if not self._attached and self._input_open:
            self._spawn(self.finish_input(reason))

    async def finish_input(self, reason: EndReason, error: errors.StreamError | None = None) -> None:
        """No more client audio: flush the engine; the session ends when its finals are out."""
        if not self._input_open:
            return
        self._input_open = False
        self._end_reason, self.error = reason, error
        self._close_deadline = self._clock.monotonic() + self._server.final_flush_timeout_s
        log.info("client_input_ended", reason=reason.value)
        await self._forward(self._intake.finish(self._clock.monotonic()))
        await self._queue.put(_Close())

    # -- engine side -------------------------------------------------------

    async def _drive_engine(self) -> None:
        try:
            while True:
                assert self._link is not None
                try:
                    await self._pump(self._link)
                    break
                except EngineFailed as exc:
                    self._fail(EndReason.ERROR, errors.StreamError(
                        grpc.StatusCode.INTERNAL, errors.ENGINE_ERROR, f"the engine failed on this session: {exc}"),
                        "the engine failed on this session")
                    break
                except (EngineLost, Frozen) as exc:
                    await self._link.cancel()
                    if not await self._reconnect(exc):
                        break
        finally:
            if self._link is not None:
                await self._link.cancel()
            self._complete()

    async def _reconnect(self, cause: Exception) -> bool:
        """Seam: finalize what was heard, open a fresh engine session, replay unheard audio."""
        frozen = isinstance(cause, Frozen)
        if frozen:
            self.freeze_recoveries += 1
        else:
            self.engine_restarts += 1
        metrics.ENGINE_EVENTS.labels("engine_reset" if frozen else "engine_restarted").inc()
        tracing.session_event(self.session_id, "engine_reset" if frozen else "engine_restarted",
                              {"audio_ms": self._written_ms})
        self._put_final()
        what = "engine session froze; it was reset" if frozen else "speech engine restarted"
        log.warning("engine_seam", cause=str(cause), replay_ms=self._replay.duration_ms())
        self.log.append(Notice("ENGINE_RESET" if frozen else "ENGINE_RESTARTED",
                               f"{what}; the current utterance was closed and audio since then is replayed"))
        base = self._replay.start_ms(default_ms=self._written_ms)
        # A frozen session's sidecar is alive: its stub is not stale, do not wait for it to go down.
        failed = None if frozen else self._link
        deadline = self._clock.monotonic() + self._server.engine_recovery_timeout_s
        attempts = int(self._server.engine_recovery_timeout_s / RECOVERY_RETRY_S) + 1
        while True:
            try:
                self._link = await self._open_link(base, max(deadline - self._clock.monotonic(), 0.0), failed)
                break
            except (errors.StreamError, EngineLost) as exc:
                attempts -= 1
                if attempts <= 0 or self._clock.monotonic() >= deadline:
                    self._fail(EndReason.ENGINE_LOST, errors.unavailable(
                        errors.ENGINE_UNAVAILABLE, f"the speech engine was lost mid-session: {exc}",
                        self._server.retry_delay_s), "the speech engine stopped; reconnect to continue")
                    return False
                # The sidecar may be dead but not yet noticed (its stub still looks ready), or restarting:
                # keep trying until the recovery deadline rather than give up on the first refusal.
                log.info("engine_reopen_retry", error=str(exc))
                await asyncio.sleep(RECOVERY_RETRY_S)
        # The writer replays it first, under the freeze watch: a fresh engine session may stall too.
        self._freeze.restart(base)
        self._resend = self._replay.snapshot()
        if self._close_deadline is not None:  # the fresh engine gets the whole flush timeout
            self._close_deadline = self._clock.monotonic() + self._server.final_flush_timeout_s
        return True

    def _fail(self, reason: EndReason, error: errors.StreamError, message: str) -> None:
        log.warning("session_failed", reason=reason.value, error=error.message)
        self._put_final()
        self._input_open = False
        self._end_reason, self._end_message, self.error = reason, message, error
        self._stop_input.set()
        self._interrupt_reader()

    async def _pump(self, link: EngineLink) -> None:
        writer = asyncio.ensure_future(self._write(link))
        try:
            while True:
                if writer.done() and writer.exception() is not None:
                    raise writer.exception()  # type: ignore[misc]
                out = await link.next_output(WATCH_INTERVAL_S)
                if out is None:
                    self._freeze.check()
                    if self._close_deadline is not None and self._clock.monotonic() > self._close_deadline:
                        if self._freeze.unanswered_since is not None and self._closing_resets < CLOSING_RESETS:
                            # Closing and the engine has not answered (Closed is owed): treat it as frozen
                            # now rather than give up on the finals (freeze_timeout_s may be longer).
                            self._closing_resets += 1
                            self._freeze.disarm()
                            raise Frozen("no final results within final_flush_timeout_s")
                        self._put_final()  # what the client saw as interim text still becomes final
                        self._end_message = "engine did not deliver final results in time"
                        return
                    continue
                self._freeze.answered(out)
                if self._close_deadline is not None:  # the engine is making progress: keep waiting
                    self._close_deadline = self._clock.monotonic() + self._server.final_flush_timeout_s
                if isinstance(out, Delta):
                    self._replay.covered(out.end_ms)
                    result = self._assembler.add(out.text, out.start_ms, out.end_ms)
                    if result is not None and self.cfg.interim_results:
                        self._stats.result(final=False)
                        self.log.append(result)
                elif isinstance(out, Revision):  # the engine's final text of the utterance: the final result's
                    self._assembler.revise((d.text, d.start_ms, d.end_ms) for d in out.deltas)
                elif isinstance(out, Flushed):
                    self._replay.covered(out.audio_ms)
                    self._put_final()
                elif isinstance(out, Diagnostic):
                    metrics.ENGINE_EVENTS.labels(out.kind).inc()
                    self.log.append(Notice(f"ENGINE_{out.kind.upper()}", out.message))
                elif isinstance(out, Closed):
                    self._put_final()
                    return
        finally:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, EngineLost):
                await writer

    async def _write(self, link: EngineLink) -> None:
        resend, self._resend = self._resend, []
        # Audio counts as given to the engine before its write: a write held by the engine's flow control is
        # audio the engine has not taken in (the freeze watch judges that).
        for chunk in resend:
            self._freeze.sent(chunk)
            await link.send_audio(chunk.pcm16, chunk.speech)
        if self._close_sent:
            self._freeze.close_sent()
            await link.send_close()
        while True:
            item = await self._queue.get()
            if isinstance(item, Chunk):
                self._replay.written(item)
                self._freeze.sent(item)
                await link.send_audio(item.pcm16, item.speech)
                self._written_ms = item.end_ms
                lag_s = self._clock.monotonic() - item.received_at
                self._write_lag_ms = int(lag_s * 1000)
                metrics.LAG.observe(lag_s)
            elif isinstance(item, _Flush):
                await link.send_flush(item.marker)
            else:
                self._close_sent = True
                self._freeze.close_sent()
                await link.send_close()

    def _put_final(self) -> None:
        result = self._assembler.finalize()
        if result is not None:
            self._stats.result(final=True)
            self.log.append(result)

    def record_metrics(self) -> None:
        self._stats.ended(self._end_reason, self._written_ms, self.engine_restarts, self.freeze_recoveries)

    def _complete(self) -> None:
        if self.ended:
            return
        self.ended = True
        self.log.append(Ended(self._end_reason, self._end_message, self._written_ms))
        self.log.close()
        for task in list(self._tasks):
            if task is not asyncio.current_task():
                task.cancel()
        self._on_end(self)
        log.info("session_ended", reason=self._end_reason.value, engine_restarts=self.engine_restarts,
                 freeze_recoveries=self.freeze_recoveries)

    # -- timers ------------------------------------------------------------

    async def _watch(self) -> None:
        """Act on the session's timers (see SessionTimers) until client input ends."""
        while self._input_open:
            await asyncio.sleep(WATCH_INTERVAL_S)
            due = self._timers.tick(holding_client_back=self._consumer is not None and not self._reading
                                    and self._queue.full())
            if due.resume_window_passed:
                log.info("resume_window_passed")
                await self.finish_input(EndReason.CLIENT_GONE)
                continue
            if due.idle_timeout:
                self.stop_input(EndReason.IDLE_TIMEOUT)
            elif due.idle_warning_after_s is not None:
                self.log.append(Notice("IDLE_WARNING", f"no audio or keep_alive for {due.idle_warning_after_s:.1f}s; "
                                       f"the session ends after {self.cfg.idle_timeout_s:.1f}s without one"))
            if due.flow_report:
                self.log.append(self.flow_report())

    def flow_report(self) -> FlowReport:
        buffered = self._intake.produced_ms - self._written_ms
        return FlowReport(acked_audio_ms=self._intake.received_ms, acked_audio_bytes=self._intake.bytes_in,
                          buffered_audio_ms=max(buffered, 0), lag_ms=self._write_lag_ms if buffered > 0 else 0)

    async def abandon(self) -> None:
        """The client vanished before any audio: there is nothing to resume, so end now and free the slot."""
        self._attached = False
        if not self.ended:
            log.info("session_abandoned", reason="client gone before any audio")
            self._end_reason = EndReason.CLIENT_GONE
        await self.close_now()

    async def close_now(self) -> None:
        """Last resort at shutdown: stop everything without waiting for finals."""
        for task in list(self._tasks):
            task.cancel()
        if self._link is not None:
            await self._link.cancel()
        self._complete()


class _Stopped:
    pass


_STOPPED = _Stopped()
