"""One recognition session: client audio in, engine session on the sidecar, results out.

Two tasks per session: the client reader (decode, VAD, write to the engine;
HTTP/2 flow control means a slow engine stops us reading the client) and the
engine reader (deltas → results). Every way a session ends goes through the
same path: stop reading, close the engine input, take the final results, end
with a reason. Errors are raised only after the finals have been delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from enum import Enum
from typing import Any

import grpc
import structlog

from engine_sidecar._proto import engine_pb2 as epb
from engine_sidecar._proto import engine_pb2_grpc
from engine_sidecar.convert import output_from_proto
from engine_sidecar.engine import Closed, Delta, Diagnostic, Flushed

from . import errors
from .audio.decode import Encoding, InvalidAudio
from .audio.pipeline import AudioPipeline, EngineChunk, PipelineOutput
from .audio.vad import SpeechBoundary
from .clock import Clock
from .config import Config
from .events import AudioIn, ClientInput, Ended, EndReason, FinalizeIn, Notice, SessionOutput, SpeechEvent, Started
from .session_config import SessionConfig
from .transcript import UtteranceAssembler

log = structlog.get_logger("session")
OUTPUT_QUEUE_SIZE = 256
ENGINE_OPEN_TIMEOUT_S = 30.0


class _Signal(Enum):
    DRAIN = "drain"
    IDLE = "idle"
    STOP = "stop"


class RecognizeSession:
    def __init__(self, session_id: str, cfg: SessionConfig, server: Config,
                 stub: engine_pb2_grpc.EngineStub, clock: Clock) -> None:
        self.session_id = session_id
        self._cfg = cfg
        self._server = server
        self._stub = stub
        self._clock = clock
        self._pipeline = AudioPipeline(cfg.encoding, cfg.sample_rate_hz, server.vad_aggressiveness,
                                       cfg.endpointing_silence_ms)
        self._assembler = UtteranceAssembler(session_id)
        self._out: asyncio.Queue[SessionOutput | _Signal] = asyncio.Queue(maxsize=OUTPUT_QUEUE_SIZE)
        self._drain = asyncio.Event()
        self._call: grpc.aio.StreamStreamCall | None = None
        self._end_reason = EndReason.CLIENT_END
        self._end_message = ""
        self._error: errors.StreamError | None = None
        self._audio_ms = 0
        self._flush_marker = 0
        self._last_activity = clock.monotonic()
        self._close_deadline: float | None = None
        self._stopping = False
        self._max_samples = int(cfg.max_duration_s * cfg.sample_rate_hz) or None
        self._bytes_per_sample = 2 if cfg.encoding is Encoding.LINEAR16 else 1

    async def open(self) -> Started:
        """Open the engine session; UNAVAILABLE if the sidecar cannot take it."""
        self._call = self._stub.Session()
        try:
            await self._call.write(epb.SessionInput(open=epb.Open(
                session_id=self.session_id, language_code=self._cfg.language_code, sample_rate_hz=16000)))
            first = await asyncio.wait_for(self._call.read(), ENGINE_OPEN_TIMEOUT_S)
        except (grpc.RpcError, TimeoutError) as exc:
            self._call.cancel()
            code = exc.code() if isinstance(exc, grpc.aio.AioRpcError) else None
            reason = errors.CAPACITY if code == grpc.StatusCode.RESOURCE_EXHAUSTED else errors.ENGINE_UNAVAILABLE
            raise errors.unavailable(reason, f"engine could not open a session: {code or exc}",
                                     self._server.retry_delay_s) from exc
        if first is grpc.aio.EOF or first.WhichOneof("output") != "opened":
            self._call.cancel()
            raise errors.unavailable(errors.ENGINE_UNAVAILABLE, "engine refused the session",
                                     self._server.retry_delay_s)
        return Started(self.session_id, first.opened.engine, first.opened.model)

    def drain(self) -> None:
        self._drain.set()

    async def run(self, inputs: AsyncIterator[ClientInput]) -> AsyncIterator[SessionOutput]:
        tasks = [asyncio.create_task(self._read_client(inputs)), asyncio.create_task(self._read_engine())]
        try:
            while True:
                item = await self._next_output()
                if item is _Signal.STOP:
                    break
                assert not isinstance(item, _Signal)
                yield item
            yield Ended(self._end_reason, self._end_message, self._audio_ms)
        finally:
            self._stopping = True
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self._call is not None:
                self._call.cancel()
        if self._error is not None:
            raise self._error

    async def _next_output(self) -> SessionOutput | _Signal:
        if self._close_deadline is None:
            return await self._out.get()
        try:
            return await asyncio.wait_for(self._out.get(), max(0.0, self._close_deadline - self._clock.monotonic()))
        except TimeoutError:
            self._end_message = "engine did not deliver final results in time"
            log.warning("final_flush_timeout")
            return _Signal.STOP

    # -- client side -------------------------------------------------------

    async def _read_client(self, inputs: AsyncIterator[ClientInput]) -> None:
        pending: asyncio.Future[ClientInput | None] | None = None
        drain = asyncio.ensure_future(self._drain.wait())
        reason = EndReason.CLIENT_END
        try:
            while True:
                if pending is None:
                    pending = asyncio.ensure_future(anext(inputs, None))
                signal = await self._wait_input(pending, drain)
                if signal is not None:
                    reason = EndReason.DRAINING if signal is _Signal.DRAIN else EndReason.IDLE_TIMEOUT
                    break
                msg, pending = pending.result(), None
                if msg is None:
                    break
                self._last_activity = self._clock.monotonic()
                if isinstance(msg, AudioIn):
                    if await self._on_audio(msg.data):
                        reason = EndReason.MAX_DURATION
                        break
                elif isinstance(msg, FinalizeIn):
                    await self._forward(self._pipeline.cut())
                    await self._flush()
            await self._forward(self._pipeline.finish())
        except errors.StreamError as exc:
            reason, self._error = EndReason.ERROR, exc
        except InvalidAudio as exc:
            reason = EndReason.ERROR
            self._error = errors.StreamError(grpc.StatusCode.INVALID_ARGUMENT, errors.INVALID_AUDIO, str(exc),
                                             field="audio")
        except (grpc.RpcError, asyncio.InvalidStateError):
            return  # the engine stream is gone; the engine reader reports it
        finally:
            drain.cancel()
            if pending is not None:
                pending.cancel()
        self._end_reason = reason
        self._close_deadline = self._clock.monotonic() + self._server.final_flush_timeout_s
        log.info("client_input_ended", reason=reason.value)
        with contextlib.suppress(grpc.RpcError, asyncio.InvalidStateError):
            await self._engine_write(epb.SessionInput(close=epb.Close()))

    async def _wait_input(self, pending: asyncio.Future[ClientInput | None],
                          drain: asyncio.Future[Any]) -> _Signal | None:
        while True:
            idle_left = self._last_activity + self._cfg.idle_timeout_s - self._clock.monotonic()
            if idle_left <= 0:
                return _Signal.IDLE
            waiting: set[asyncio.Future[Any]] = {pending, drain}
            done, _ = await asyncio.wait(waiting, timeout=idle_left, return_when=asyncio.FIRST_COMPLETED)
            if pending in done:
                return None
            if drain in done:
                return _Signal.DRAIN

    async def _on_audio(self, data: bytes) -> bool:
        """Feed audio; True when the session reached its maximum duration."""
        limit = self._server.max_audio_bytes_per_message
        if len(data) > limit:
            raise errors.StreamError(
                grpc.StatusCode.INVALID_ARGUMENT, errors.AUDIO_MESSAGE_TOO_LARGE,
                f"audio message of {len(data)} bytes exceeds max_audio_bytes_per_message={limit}", field="audio")
        at_cap = False
        if self._max_samples is not None:
            room = (self._max_samples - self._pipeline.samples_in) * self._bytes_per_sample
            if len(data) >= room:
                data, at_cap = data[:max(room, 0)], True
        await self._forward(self._pipeline.push(data))
        return at_cap

    async def _forward(self, outputs: list[PipelineOutput]) -> None:
        for item in outputs:
            if isinstance(item, EngineChunk):
                await self._engine_write(epb.SessionInput(audio=epb.AudioChunk(pcm16=item.pcm16, speech=item.speech)))
            elif isinstance(item, SpeechBoundary):
                await self._out.put(SpeechEvent(item.started, item.offset_ms))
                if not item.started:
                    await self._flush()

    async def _flush(self) -> None:
        self._flush_marker += 1
        await self._engine_write(epb.SessionInput(flush=epb.Flush(marker=self._flush_marker)))

    async def _engine_write(self, msg: epb.SessionInput) -> None:
        assert self._call is not None
        await self._call.write(msg)

    # -- engine side -------------------------------------------------------

    async def _read_engine(self) -> None:
        try:
            await self._consume_engine()
        except asyncio.CancelledError:
            if self._stopping:
                raise
            # grpc raises CancelledError in reads when the channel of a dead sidecar is closed.
            await self._engine_failed(None)
        except (grpc.RpcError, errors.StreamError) as exc:
            # Any failure here is the engine's: our own cancel only happens once nobody reads.
            await self._engine_failed(exc)

    async def _consume_engine(self) -> None:
        assert self._call is not None
        # read(), not `async for`: open() already used read() and grpc forbids mixing styles.
        while (msg := await self._call.read()) is not grpc.aio.EOF:
            out = output_from_proto(msg)
            if isinstance(out, Delta):
                result = self._assembler.add(out.text, out.start_ms, out.end_ms)
                if result is not None and self._cfg.interim_results:
                    await self._out.put(result)
            elif isinstance(out, Flushed):
                self._audio_ms = out.audio_ms
                await self._put_final()
            elif isinstance(out, Diagnostic):
                await self._out.put(Notice(f"ENGINE_{out.kind.upper()}", out.message))
            elif isinstance(out, Closed):
                self._audio_ms = out.audio_ms
                await self._put_final()
                await self._out.put(_Signal.STOP)
                return
        raise errors.unavailable(errors.ENGINE_UNAVAILABLE, "engine stream ended early", self._server.retry_delay_s)

    async def _engine_failed(self, exc: BaseException | None) -> None:
        """End the session after the engine failed: finals first, then the reason."""
        await self._put_final()
        if isinstance(exc, grpc.aio.AioRpcError) and exc.code() == grpc.StatusCode.ABORTED:
            # The sidecar is alive but its engine failed this one session.
            log.error("engine_error", error=exc.details())
            self._end_reason, self._end_message = EndReason.ERROR, "the engine failed on this session"
            self._error = errors.StreamError(grpc.StatusCode.INTERNAL, errors.ENGINE_ERROR,
                                             f"the engine failed on this session: {exc.details()}")
        else:
            log.warning("engine_lost", error=str(exc) if exc else "channel closed")
            self._end_reason = EndReason.ENGINE_LOST
            self._end_message = "the speech engine stopped; reconnect to continue"
            self._error = errors.unavailable(errors.ENGINE_UNAVAILABLE, "the speech engine was lost mid-session",
                                             self._server.retry_delay_s)
        await self._out.put(_Signal.STOP)

    async def _put_final(self) -> None:
        result = self._assembler.finalize()
        if result is not None:
            await self._out.put(result)
