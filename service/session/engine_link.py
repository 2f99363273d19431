"""The real engine source: a stream on a sidecar the supervisor keeps ready (sidecar_engines.py opens it).

A session may use several links in a row (after a sidecar restart, or a reset
of a frozen engine session); each starts its engine clock at zero, so the link
shifts every output by `base_ms`, the session time its first audio had.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace

import grpc

from engine_api.audio import SAMPLE_RATE_HZ
from engine_api.info import InterimStability, PositionMode
from engine_api.outputs import Closed, Delta, Diagnostic, EngineOutput, Flushed, Progress, Revision
from engine_api.v1 import engine_pb2 as epb
from engine_api.v1 import engine_pb2_grpc
from engine_api.wire import output_from_proto

from ..limits import ENGINE_OUTPUTS
from .engine_source import EngineFailed, EngineFull, EngineLost, StreamInfo


def _shifted(out: EngineOutput, base_ms: int) -> EngineOutput:
    if not base_ms:  # a session's first link (most of them): outputs are in session time already
        return out
    if isinstance(out, Delta):
        return replace(out, start_ms=out.start_ms + base_ms, end_ms=out.end_ms + base_ms)
    if isinstance(out, Revision):
        return Revision(tuple(replace(d, start_ms=d.start_ms + base_ms, end_ms=d.end_ms + base_ms)
                              for d in out.deltas))
    if isinstance(out, Flushed | Closed | Progress):
        return replace(out, audio_ms=out.audio_ms + base_ms)
    if isinstance(out, Diagnostic):
        return replace(out, at_ms=out.at_ms + base_ms)
    return out


class EngineLink:
    """One engine stream on a sidecar, for one stretch of a session (an EngineStream): what both transports
    share. The transport opens the stream, reads the engine's messages into `_received` and writes the
    service's: GrpcLink (the Session call) or FramesLink (frames_link.py)."""

    def __init__(self, stub: engine_pb2_grpc.EngineStub, session_id: str, language: str, base_ms: int) -> None:
        self.base_ms = base_ms
        self.stub = stub  # the engine, as the pool knows it
        self.info = StreamInfo()
        self._open_msg = epb.SessionInput(open=epb.Open(session_id=session_id, language_code=language,
                                                        sample_rate_hz=SAMPLE_RATE_HZ))
        self._outputs: asyncio.Queue[EngineOutput | BaseException] = asyncio.Queue(maxsize=ENGINE_OUTPUTS.value)
        self._reader: asyncio.Task[None] | None = None

    async def open(self, timeout_s: float) -> None:
        """Open the engine session. Whatever ends the handshake early (refusal, timeout, a cancel of this
        task) drops the stream, so the sidecar gives its slot back."""
        raise NotImplementedError

    def _opened(self, first: epb.SessionOutput | None) -> None:
        """The engine's first answer; then the outputs are read."""
        if first is None or first.WhichOneof("output") != "opened":
            raise EngineLost("engine refused the session")
        opened = first.opened
        self.info = StreamInfo(opened.engine, opened.model, PositionMode.from_wire(opened.position_mode),
                               opened.position_mode_reason,
                               InterimStability.from_wire(opened.interim_stability))
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        raise NotImplementedError

    async def _received(self, msg: epb.SessionOutput) -> bool:
        """An engine message, in order; True once it was the last (Closed)."""
        out = output_from_proto(msg)
        if out is None:
            return False
        await self._outputs.put(_shifted(out, self.base_ms))
        return isinstance(out, Closed)

    async def _failed(self, failure: BaseException) -> None:
        await self._outputs.put(failure)

    @property
    def done(self) -> bool:
        """The engine stream has ended (closed, cancelled, refused, or its sidecar gone); not before open()."""
        raise NotImplementedError

    async def next_output(self) -> EngineOutput:
        """The next output. Raises EngineLost / EngineFailed."""
        item = await self._outputs.get()
        if isinstance(item, BaseException):
            raise item
        return item

    async def write(self, msg: epb.SessionInput) -> None:
        raise NotImplementedError

    async def send_audio(self, pcm16: bytes, speech: bool) -> None:
        await self.write(epb.SessionInput(audio=epb.AudioChunk(pcm16=pcm16, speech=speech)))

    async def send_flush(self, marker: int) -> None:
        await self.write(epb.SessionInput(flush=epb.Flush(marker=marker)))

    async def send_close(self) -> None:
        await self.write(epb.SessionInput(close=epb.Close()))

    async def cancel(self) -> None:
        """Drop the engine session (the sidecar aborts it) and stop reading."""
        self._drop()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader

    def _drop(self) -> None:
        raise NotImplementedError


class GrpcLink(EngineLink):
    """The session on the sidecar's gRPC Session call."""

    def __init__(self, stub: engine_pb2_grpc.EngineStub, session_id: str, language: str, base_ms: int) -> None:
        super().__init__(stub, session_id, language, base_ms)
        self._call: grpc.aio.StreamStreamCall | None = None

    async def open(self, timeout_s: float) -> None:
        call = self._call = self.stub.Session()
        try:
            # asyncio.timeout, not wait_for: no inner task whose exception could go unretrieved (3.11).
            async with asyncio.timeout(timeout_s):
                await call.write(self._open_msg)
                first = await call.read()
        except grpc.aio.AioRpcError as exc:
            call.cancel()
            raise open_refusal(exc.code().name, exc.details() or "") from exc
        except (TimeoutError, asyncio.InvalidStateError) as exc:
            call.cancel()
            raise EngineLost(f"engine did not open the session: {exc!r}") from exc
        except asyncio.CancelledError:
            call.cancel()
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # we are being cancelled
            raise EngineLost("engine channel closed while opening") from None  # grpc's doing
        try:
            self._opened(None if first is grpc.aio.EOF else first)
        except EngineLost:
            call.cancel()
            raise

    async def _read(self) -> None:
        assert self._call is not None
        failure: BaseException
        try:
            while (msg := await self._call.read()) is not grpc.aio.EOF:
                if await self._received(msg):
                    return
            failure = EngineLost("engine stream ended without closing")
        except grpc.aio.AioRpcError as exc:
            failure = stream_failure(exc.code().name, exc.details() or "")
        except asyncio.CancelledError:
            if self._call.cancelled():
                raise  # our own cancel
            failure = EngineLost("engine channel closed")  # grpc cancels reads when a dead sidecar's channel closes
        await self._failed(failure)

    @property
    def done(self) -> bool:
        return self._call is not None and self._call.done()

    async def write(self, msg: epb.SessionInput) -> None:
        assert self._call is not None
        try:
            await self._call.write(msg)
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as exc:
            raise EngineLost(f"write failed: {exc!r}") from exc

    def _drop(self) -> None:
        if self._call is not None:
            self._call.cancel()


def stream_failure(code: str, details: str) -> EngineFailed | EngineLost:
    """How an engine stream that ended with status `code` (a gRPC status code's name) fails its session."""
    return EngineFailed(details) if code == "ABORTED" else EngineLost(f"{code}: {details}")


def open_refusal(code: str, details: str) -> EngineFull | EngineLost:
    """How an engine's refusal to open a session (status `code`) is taken: full (try another), else lost."""
    return EngineFull(details) if code == "RESOURCE_EXHAUSTED" else EngineLost(f"{code}: {details}")
