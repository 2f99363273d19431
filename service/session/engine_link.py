"""The real engine source: gRPC streams on the sidecar the supervisor keeps ready.

A session may use several links in a row (after a sidecar restart, or a reset
of a frozen engine session); each starts its engine clock at zero, so the link
shifts every output by `base_ms`, the session time its first audio had.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from typing import Protocol

import grpc

from engine_api.audio import SAMPLE_RATE_HZ
from engine_api.info import InterimStability, PositionMode
from engine_api.outputs import Closed, Delta, Diagnostic, EngineOutput, Flushed, Progress, Revision
from engine_api.v1 import engine_pb2 as epb
from engine_api.v1 import engine_pb2_grpc
from engine_api.wire import output_from_proto

from ..limits import ENGINE_OUTPUTS
from .engine_source import EngineFailed, EngineFull, EngineLost, EngineStream, EngineUnavailable, StreamInfo

OPEN_TIMEOUT_S = 30.0


class EnginePicker(Protocol):
    """The engines a session may open on (service/engine_pool.py): one sidecar, or several."""

    async def pick(self, wait_s: float, failed: engine_pb2_grpc.EngineStub | None = None
                   ) -> list[engine_pb2_grpc.EngineStub]:
        """Stubs of ready engines to try, best first; empty when none is ready within wait_s. `failed`: the
        stub whose stream just broke: its engine is left out while another is ready, else given a moment to be
        noticed dead (as a lone sidecar is)."""
        ...

    def place(self, stub: engine_pb2_grpc.EngineStub, link: EngineLink) -> None:
        """A session's stream is opening on that engine: placement counts it from now on, while it lasts (so
        that a burst of opens spreads before any of them has answered)."""
        ...

    def opened(self, stub: engine_pb2_grpc.EngineStub, link: EngineLink) -> None:
        """The engine opened it."""
        ...


class SidecarEngines:
    """Opens EngineLinks on an engine the pool picks: the best first, the next when one refuses or is gone."""

    def __init__(self, engines: EnginePicker) -> None:
        self._engines = engines

    async def open(self, session_id: str, language: str, base_ms: int, wait_s: float,
                   failed: EngineStream | None = None) -> EngineLink:
        stale = failed.stub if isinstance(failed, EngineLink) else None
        stubs = await self._engines.pick(wait_s, stale)
        if not stubs:
            raise EngineUnavailable("speech engine is starting or restarting")
        for n, stub in enumerate(stubs, 1):
            link = EngineLink(stub, session_id, language, base_ms)
            self._engines.place(stub, link)
            try:
                await link.open(OPEN_TIMEOUT_S)
            except (EngineFull, EngineLost):
                if n == len(stubs):
                    raise  # the last engine's answer is the session's
                continue
            self._engines.opened(stub, link)
            return link
        raise AssertionError("not reached")  # the loop returns or raises


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
    """One engine stream on the sidecar, for one stretch of a session (an EngineStream)."""

    def __init__(self, stub: engine_pb2_grpc.EngineStub, session_id: str, language: str, base_ms: int) -> None:
        self.base_ms = base_ms
        self.stub = stub
        self.info = StreamInfo()
        self._open_msg = epb.SessionInput(open=epb.Open(session_id=session_id, language_code=language,
                                                        sample_rate_hz=SAMPLE_RATE_HZ))
        self._call: grpc.aio.StreamStreamCall | None = None
        self._outputs: asyncio.Queue[EngineOutput | BaseException] = asyncio.Queue(maxsize=ENGINE_OUTPUTS.value)
        self._reader: asyncio.Task[None] | None = None

    async def open(self, timeout_s: float) -> None:
        """Open the engine session. Whatever ends the handshake early (refusal, timeout, a cancel of this
        task) cancels the call, so the sidecar gives its slot back."""
        call = self._call = self.stub.Session()
        try:
            # asyncio.timeout, not wait_for: no inner task whose exception could go unretrieved (3.11).
            async with asyncio.timeout(timeout_s):
                await call.write(self._open_msg)
                first = await call.read()
        except grpc.aio.AioRpcError as exc:
            call.cancel()
            if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise EngineFull(exc.details()) from exc
            raise EngineLost(f"{exc.code().name}: {exc.details()}") from exc
        except (TimeoutError, asyncio.InvalidStateError) as exc:
            call.cancel()
            raise EngineLost(f"engine did not open the session: {exc!r}") from exc
        except asyncio.CancelledError:
            call.cancel()
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # we are being cancelled
            raise EngineLost("engine channel closed while opening") from None  # grpc's doing
        if first is grpc.aio.EOF or first.WhichOneof("output") != "opened":
            call.cancel()
            raise EngineLost("engine refused the session")
        opened = first.opened
        self.info = StreamInfo(opened.engine, opened.model, PositionMode.from_wire(opened.position_mode),
                               opened.position_mode_reason,
                               InterimStability.from_wire(opened.interim_stability))
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self._call is not None
        failure: BaseException
        try:
            while (msg := await self._call.read()) is not grpc.aio.EOF:
                out = output_from_proto(msg)
                if out is not None:
                    await self._outputs.put(_shifted(out, self.base_ms))
                    if isinstance(out, Closed):
                        return
            failure = EngineLost("engine stream ended without closing")
        except grpc.aio.AioRpcError as exc:
            failure = (EngineFailed(exc.details()) if exc.code() == grpc.StatusCode.ABORTED
                       else EngineLost(f"{exc.code().name}: {exc.details()}"))
        except asyncio.CancelledError:
            if self._call.cancelled():
                raise  # our own cancel
            failure = EngineLost("engine channel closed")  # grpc cancels reads when a dead sidecar's channel closes
        await self._outputs.put(failure)

    @property
    def done(self) -> bool:
        """The engine stream has ended (closed, cancelled, refused, or its sidecar gone); not before open()."""
        return self._call is not None and self._call.done()

    async def next_output(self) -> EngineOutput:
        """The next output. Raises EngineLost / EngineFailed."""
        item = await self._outputs.get()
        if isinstance(item, BaseException):
            raise item
        return item

    async def write(self, msg: epb.SessionInput) -> None:
        assert self._call is not None
        try:
            await self._call.write(msg)
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as exc:
            raise EngineLost(f"write failed: {exc!r}") from exc

    async def send_audio(self, pcm16: bytes, speech: bool) -> None:
        await self.write(epb.SessionInput(audio=epb.AudioChunk(pcm16=pcm16, speech=speech)))

    async def send_flush(self, marker: int) -> None:
        await self.write(epb.SessionInput(flush=epb.Flush(marker=marker)))

    async def send_close(self) -> None:
        await self.write(epb.SessionInput(close=epb.Close()))

    async def cancel(self) -> None:
        """Drop the engine session (the sidecar aborts it) and stop reading."""
        if self._call is not None:
            self._call.cancel()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
