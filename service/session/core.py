"""One recognition session, independent of any single client stream or engine stream.

A session has two halves joined by the engine queue (engine_inputs.py): the inbound half
(inbound.py) reads the attached client's requests into the queue; the engine half
(engine_chain.py) feeds the queue to a chain of engine streams and turns their outputs into
responses in the session's ResponseLog, which the client's stream reads. If the client vanishes,
the session waits `resume_window_s` for it to come back with the resume token; if the engine is
lost or freezes, the engine half opens a fresh stream and replays.

This module is the lifecycle: the session's Phase, and every way it ends (input ends, input is
stopped, the engine gives up, the client is gone for good, shutdown) decided in one place.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import replace
from typing import Any

import grpc
import structlog

from engine_api.phrases import PhraseHintSupport

from .. import errors, phrase_hints
from ..clock import Clock
from ..config import Config
from ..events import ClientInput, Ended, EndReason, FlowReport, Notice, Started
from ..session_config import SessionConfig
from .alarm import Alarm, sleep
from .engine_chain import EngineChain, EngineGone
from .engine_inputs import engine_queue
from .engine_source import EngineRequest, EngineSource
from .inbound import Inbound, StreamEnd
from .log import ResponseLog
from .phase import Ending, Phase
from .results import Results
from .stats import SessionStats
from .timers import SessionTimers

__all__ = ["HALF_CLOSE_GRACE_S", "Session"]

log = structlog.get_logger("session")
HALF_CLOSE_GRACE_S = 0.02  # end of the request stream → half-close, unless the RPC is cancelled meanwhile


class Session:
    def __init__(
        self,
        session_id: str,
        cfg: SessionConfig,
        server: Config,
        engines: EngineSource,
        clock: Clock,
        on_end: Callable[[Session], None],
        token_prefix: str = "",
    ) -> None:
        self.session_id = session_id
        self.cfg = cfg
        self.resume_token = token_prefix + secrets.token_urlsafe(24)  # prefix: the worker that holds it
        self.started: Started | None = None  # the first response, sent again (resumed) to a resuming stream
        self.log = ResponseLog()
        self.phase = Phase.OPEN
        self.ending = Ending()
        self._attached = False
        self._cut_short = False  # ended by close_now(), not by its engine's last results
        self._server = server
        self._clock = clock
        self._on_end = on_end
        self._tasks: set[asyncio.Task[None]] = set()
        self._stats = SessionStats(session_id, clock)
        self._timers = SessionTimers(clock, cfg.idle_timeout_s, server.resume_window_s, cfg.flow_status_interval_s)
        self._timer_alarm = Alarm(clock)
        queue = engine_queue()
        self._inbound = Inbound(cfg, server, clock, queue, self.log, self._stats, self._timers)
        self._results = Results(session_id, cfg.interim_results, self.log, self._stats)
        request = EngineRequest(session_id, cfg.language_code, cfg.phrase_hints)
        self._engine = EngineChain(request, server, engines, clock, queue, self.log, self._results)

    @property
    def ended(self) -> bool:
        return self.phase is Phase.ENDED

    @property
    def error(self) -> errors.StreamError | None:
        """The error the client's stream ends with, after the Ended response."""
        return self.ending.error

    @property
    def engine_restarts(self) -> int:
        return self._engine.restarts

    @property
    def freeze_recoveries(self) -> int:
        return self._engine.freeze_recoveries

    @property
    def has_audio(self) -> bool:
        """Whether any client audio reached the session (on this or an earlier stream)."""
        return self._inbound.intake.bytes_in > 0

    async def start(self) -> Started:
        """Open the first engine stream; UNAVAILABLE if no engine can take the session."""
        info = await self._engine.open()
        self._spawn(self._run_engine())
        self._spawn(self._watch_timers())
        started = Started(
            self.session_id,
            info.engine,
            info.model,
            self.resume_token,
            self._server.resume_window_s,
            position_mode=info.position_mode,
            position_mode_reason=info.position_mode_reason,
            interim_stability=info.interim_stability,
            phrase_hints=info.phrase_hints,
        )
        self.log.append(started)
        self.started = started
        if info.phrase_hints is PhraseHintSupport.NONE:
            self._inbound.hints_ignored_by = info.engine or "speech"
        if self.cfg.phrase_hints and info.phrase_hints is PhraseHintSupport.NONE:
            said = f"the {info.engine} engine does not use phrase hints: {len(self.cfg.phrase_hints)} ignored"
            self.log.append(Notice(phrase_hints.IGNORED_WARNING, said))
        return started

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- client streams ----------------------------------------------------

    def attach(self, resume_audio_bytes: int | None, resume_last_seq: int = 0) -> None:
        if self._attached:
            raise errors.StreamError(
                grpc.StatusCode.FAILED_PRECONDITION,
                errors.SESSION_ATTACHED,
                "the session is still attached to another stream",
            )
        if resume_last_seq > self.log.last_seq:  # else responses up to it would be skipped, unseen
            raise errors.invalid_config(
                "config.resume_last_seq",
                f"resume_last_seq {resume_last_seq} is beyond the last response ({self.log.last_seq}) of this session",
            )
        if resume_audio_bytes is not None:
            self._inbound.intake.resume_from(resume_audio_bytes)
        self._attached = True
        self._timers.attached()
        self._timer_alarm.ring_now()  # the idle clock runs again, maybe due sooner than the resume window

    def detach(self) -> None:
        """The client vanished without ending the session: wait for a resume."""
        self._attached = False
        if self.phase is Phase.OPEN:
            self._timers.detached()
            self._timer_alarm.ring_now()
            log.info("session_detached", window_s=self._server.resume_window_s)
        elif self.phase is Phase.STOPPING:  # no stream left to end the input: end it now
            self._spawn(self._end_input(self.ending.reason))

    async def consume(self, inputs: AsyncIterator[ClientInput]) -> None:
        """Read the attached client's requests until it half-closes, errs, or input is stopped."""
        try:
            end = await self._inbound.read(inputs)
            if end is StreamEnd.HALF_CLOSED:
                # A client that vanishes (cancel, dropped connection) also ends its request stream,
                # and its RPC is cancelled a moment later (run_session then cancels us and detaches
                # the session for a resume). Give that a moment before taking this as a half-close.
                await sleep(self._clock, HALF_CLOSE_GRACE_S)
            if end is StreamEnd.MAX_DURATION:
                await self._end_input(EndReason.MAX_DURATION)
            else:
                await self._end_input(self.ending.reason if self.phase is Phase.STOPPING else EndReason.CLIENT_END)
        except errors.StreamError as exc:
            await self._end_input(EndReason.ERROR, exc)
        except Exception as exc:  # a bug, not the client's doing: end with the finals and INTERNAL, never hang
            log.exception("session_input_failed")
            await self._end_input(EndReason.ERROR, errors.internal(f"the server failed reading this stream: {exc!r}"))

    # -- how a session ends ------------------------------------------------

    def stop_input(self, reason: EndReason) -> None:
        """Stop taking client input (drain, idle); the session then ends with its finals."""
        if not self.phase.taking_input:
            return
        self.phase, self.ending = Phase.STOPPING, Ending(reason)
        self._inbound.stop()
        if not self._attached:
            self._spawn(self._end_input(reason))

    def drain(self, within_s: float) -> None:
        """Stop taking input at the end of the utterance in progress, or after `within_s` at the latest; then
        the session ends with DRAINING and its finals. Its last final is then a natural one, not one cut short
        mid-sentence, and SessionEnded.audio_duration is where a client that goes on in a new session
        (voxgate's own, ResumePolicy.reconnect_on_drain) resends from: one unbroken transcript."""
        if self.phase is not Phase.OPEN or not self._attached or not self._inbound.intake.in_speech:
            self.stop_input(EndReason.DRAINING)
            return
        self.phase, self.ending = Phase.STOPPING, Ending(EndReason.DRAINING)
        self._inbound.stop_at_endpoint()
        self._spawn(self._stop_input_after(within_s))
        log.info("session_draining_at_endpoint", within_s=within_s)

    async def _stop_input_after(self, seconds: float) -> None:
        await sleep(self._clock, seconds)
        if self.phase is Phase.STOPPING:
            self._inbound.stop()

    async def _end_input(self, reason: EndReason, error: errors.StreamError | None = None) -> None:
        """No more client audio: flush the engine; the session ends when its finals are out."""
        if not self.phase.taking_input:
            return
        self.phase, self.ending = Phase.CLOSING, Ending(reason, error=error)
        self._inbound.stop()
        self._engine.closing()
        log.info("client_input_ended", reason=reason.value)
        await self._inbound.finish()

    async def _run_engine(self) -> None:
        try:
            end = await self._engine.run()
            if isinstance(end, EngineGone):
                self._fail(end)
            elif end.finals_late:
                self.ending = replace(self.ending, message="engine did not deliver final results in time")
        finally:
            self._complete()

    def _fail(self, gone: EngineGone) -> None:
        """The engine cannot go on: the session ends now, with what was heard as its last final."""
        if self.ended:
            return
        log.warning("session_failed", reason=gone.reason.value, error=gone.error.message)
        self._results.finalize()
        self.phase, self.ending = Phase.CLOSING, Ending(gone.reason, gone.message, gone.error)
        self._inbound.stop()

    async def abandon(self) -> None:
        """The client vanished before any audio: there is nothing to resume, so end now and free the slot."""
        self._attached = False
        if not self.ended:
            log.info("session_abandoned", reason="client gone before any audio")
            self.ending = replace(self.ending, reason=EndReason.CLIENT_GONE)
        await self.close_now()

    async def close_now(self) -> None:
        """Last resort at shutdown: stop everything without waiting for finals."""
        self._cut_short = True
        for task in list(self._tasks):
            task.cancel()
        await self._engine.cancel()
        self._complete()

    def _complete(self) -> None:
        if self.ended:
            return
        self.phase = Phase.ENDED
        # Cut short, its finals did not all come: it processed only the audio up to its last one (a client that
        # goes on in a new session resends from there).
        processed_ms = self._engine.finalized_ms if self._cut_short else self._engine.written_ms
        self.log.append(Ended(self.ending.reason, self.ending.message, processed_ms))
        self.log.close()
        self._inbound.stop()
        self._timer_alarm.cancel()
        for task in list(self._tasks):
            if task is not asyncio.current_task():
                task.cancel()
        self._on_end(self)
        log.info(
            "session_ended",
            reason=self.ending.reason.value,
            engine_restarts=self.engine_restarts,
            freeze_recoveries=self.freeze_recoveries,
        )

    def record_metrics(self) -> None:
        self._stats.ended(self.ending.reason, self._engine.written_ms, self.engine_restarts, self.freeze_recoveries)

    # -- the client's clocks -----------------------------------------------

    async def _watch_timers(self) -> None:
        """Act on the session's timers (see SessionTimers) while it takes client input."""
        while self.phase is Phase.OPEN:
            if (due_at := self._timers.next_due_at()) is not None:
                self._timer_alarm.wake_by(due_at)
            await self._timer_alarm.wait()
            if self.phase is not Phase.OPEN:
                return
            due = self._timers.due()
            if due.resume_window_passed:
                log.info("resume_window_passed")
                await self._end_input(EndReason.CLIENT_GONE)
                continue
            if due.idle_timeout:
                self.stop_input(EndReason.IDLE_TIMEOUT)
            elif due.idle_warning_after_s is not None:
                self.log.append(
                    Notice(
                        "IDLE_WARNING",
                        f"no audio or keep_alive for {due.idle_warning_after_s:.1f}s; "
                        f"the session ends after {self.cfg.idle_timeout_s:.1f}s without one",
                    )
                )
            if due.flow_report:
                self.log.append(self.flow_report())

    def flow_report(self) -> FlowReport:
        intake = self._inbound.intake
        buffered = intake.produced_ms - self._engine.written_ms
        return FlowReport(
            acked_audio_ms=intake.received_ms,
            acked_audio_bytes=intake.bytes_in,
            buffered_audio_ms=max(buffered, 0),
            lag_ms=self._engine.write_lag_ms if buffered > 0 else 0,
        )
