"""The real engine source: a stream on a sidecar the supervisor keeps ready (sidecar_engines.py opens it).

A session may use several links in a row (after a sidecar restart, or a reset
of a frozen engine session); each starts its engine clock at zero, so the link
shifts every output by `base_ms`, the session time its first audio had.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from pathlib import Path

from engine_api.audio import SAMPLE_RATE_HZ
from engine_api.frames import OK, READ_LIMIT_BYTES, FrameError, frame, parse_output, read_frame, tune
from engine_api.info import InterimStability, PositionMode
from engine_api.outputs import Closed, Delta, Diagnostic, EngineOutput, Flushed, Progress, Revision
from engine_api.phrases import PhraseHint, PhraseHintSupport
from engine_api.v1 import engine_pb2 as epb
from engine_api.v1 import engine_pb2_grpc
from engine_api.wire import output_from_proto

from ..limits import ENGINE_OUTPUTS
from .engine_source import EngineFailed, EngineFull, EngineLost, EngineRequest, StreamInfo


def _shifted(out: EngineOutput, base_ms: int) -> EngineOutput:
    if not base_ms:  # a session's first link (most of them): outputs are in session time already
        return out
    if isinstance(out, Delta):
        return replace(out, start_ms=out.start_ms + base_ms, end_ms=out.end_ms + base_ms)
    if isinstance(out, Revision):
        return Revision(tuple(replace(d, start_ms=d.start_ms + base_ms, end_ms=d.end_ms + base_ms) for d in out.deltas))
    if isinstance(out, Flushed | Closed | Progress):
        return replace(out, audio_ms=out.audio_ms + base_ms)
    if isinstance(out, Diagnostic):
        return replace(out, at_ms=out.at_ms + base_ms)
    return out


class EngineLink:
    """One engine stream on a sidecar, for one stretch of a session (an EngineStream): one connection to the
    sidecar's frames socket. A refusal or failure is the `Ended` message the sidecar sends last; a connection
    that closes or breaks without one is a sidecar gone (EngineLost); dropping the stream is closing the
    connection, which the sidecar takes as a cancel."""

    def __init__(self, stub: engine_pb2_grpc.EngineStub, path: Path, request: EngineRequest, base_ms: int) -> None:
        self.base_ms = base_ms
        self.stub = stub  # the engine, as the pool knows it
        self.info = StreamInfo()
        self._open_msg = epb.SessionInput(
            open=epb.Open(
                session_id=request.session_id,
                language_code=request.language,
                sample_rate_hz=SAMPLE_RATE_HZ,
                phrase_hints=_hints(request.phrase_hints),
            )
        )
        self._outputs: asyncio.Queue[EngineOutput | BaseException] = asyncio.Queue(maxsize=ENGINE_OUTPUTS.value)
        self._reader: asyncio.Task[None] | None = None
        self._path = path
        self._reader_stream: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._ended = False  # the sidecar's Ended arrived, or the connection closed or broke

    async def open(self, timeout_s: float) -> None:
        """Open the engine session. Whatever ends the handshake early (refusal, timeout, a cancel of this
        task) drops the stream, so the sidecar gives its slot back."""
        try:
            # asyncio.timeout, not wait_for: no inner task whose exception could go unretrieved (3.11).
            async with asyncio.timeout(timeout_s):
                reader, writer = await asyncio.open_unix_connection(str(self._path), limit=READ_LIMIT_BYTES)
                self._reader_stream, self._writer = reader, writer
                tune(writer)
                writer.write(frame(self._open_msg))
                await writer.drain()
                first = await self._next_message()
        except TimeoutError as exc:  # before OSError, of which it is a kind
            self._drop()
            raise EngineLost(f"engine did not open the session: {exc!r}") from exc
        except (OSError, FrameError) as exc:
            self._drop()
            raise EngineLost(f"engine frames socket: {exc!r}") from exc
        except BaseException:
            self._drop()  # a cancel of this task: the sidecar gives the slot back when the connection closes
            raise
        if first is not None and first.WhichOneof("output") == "ended":
            self._drop()
            raise open_refusal(first.ended.code, first.ended.details)
        try:
            self._opened(first)
        except EngineLost:
            self._drop()
            raise

    def _opened(self, first: epb.SessionOutput | None) -> None:
        """The engine's first answer; then the outputs are read."""
        if first is None or first.WhichOneof("output") != "opened":
            raise EngineLost("engine refused the session")
        opened = first.opened
        self.info = StreamInfo(
            opened.engine,
            opened.model,
            PositionMode.from_wire(opened.position_mode),
            opened.position_mode_reason,
            InterimStability.from_wire(opened.interim_stability),
            PhraseHintSupport.from_wire(opened.phrase_hints),
        )
        self._reader = asyncio.create_task(self._read())

    async def _received(self, msg: epb.SessionOutput) -> bool:
        """An engine message, in order; True once it was the last (Closed)."""
        out = output_from_proto(msg)
        if out is None:
            return False
        await self._outputs.put(_shifted(out, self.base_ms))
        return isinstance(out, Closed)

    async def _failed(self, failure: BaseException) -> None:
        await self._outputs.put(failure)

    async def next_output(self) -> EngineOutput:
        """The next output. Raises EngineLost / EngineFailed."""
        item = await self._outputs.get()
        if isinstance(item, BaseException):
            raise item
        return item

    async def send_audio(self, pcm16: bytes, speech: bool) -> None:
        await self.write(epb.SessionInput(audio=epb.AudioChunk(pcm16=pcm16, speech=speech)))

    async def send_flush(self, marker: int) -> None:
        await self.write(epb.SessionInput(flush=epb.Flush(marker=marker)))

    async def send_phrase_hints(self, hints: tuple[PhraseHint, ...]) -> None:
        await self.write(epb.SessionInput(phrase_hints=epb.PhraseHints(hints=_hints(hints))))

    async def send_close(self) -> None:
        await self.write(epb.SessionInput(close=epb.Close()))

    async def cancel(self) -> None:
        """Drop the engine session (the sidecar aborts it) and stop reading."""
        self._drop()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader

    async def _next_message(self) -> epb.SessionOutput | None:
        assert self._reader_stream is not None
        body = await read_frame(self._reader_stream)
        return None if body is None else parse_output(body)

    async def _read(self) -> None:
        closed = False  # the engine's Closed came: what follows (its Ended, the connection's end) is no failure
        failure: BaseException = EngineLost("engine stream ended without closing")
        try:
            while (msg := await self._next_message()) is not None:
                if msg.WhichOneof("output") == "ended":
                    if msg.ended.code != OK:
                        failure = stream_failure(msg.ended.code, msg.ended.details)
                    break
                closed = await self._received(msg) or closed
        except (OSError, FrameError) as exc:
            failure = EngineLost(f"engine connection broke: {exc!r}")
        self._drop()
        if not closed:
            await self._failed(failure)

    @property
    def done(self) -> bool:
        """The engine stream has ended (closed, cancelled, refused, or its sidecar gone); not before open()."""
        return self._ended or (self._writer is not None and self._writer.is_closing())

    async def write(self, msg: epb.SessionInput) -> None:
        assert self._writer is not None
        if self._writer.is_closing():
            raise EngineLost("write failed: engine connection closed")
        try:
            self._writer.write(frame(msg))
            await self._writer.drain()
        except OSError as exc:
            raise EngineLost(f"write failed: {exc!r}") from exc

    def _drop(self) -> None:
        self._ended = True
        if self._writer is not None:
            # At once, unsent audio and all: a close() would first wait for the sidecar to read it, which a
            # frozen engine session never does (and the sidecar takes the closed connection for a cancel).
            self._writer.transport.abort()


def stream_failure(code: str, details: str) -> EngineFailed | EngineLost:
    """How an engine stream that ended with status `code` (a gRPC status code's name) fails its session."""
    return EngineFailed(details) if code == "ABORTED" else EngineLost(f"{code}: {details}")


def open_refusal(code: str, details: str) -> EngineFull | EngineLost:
    """How an engine's refusal to open a session (status `code`) is taken: full (try another), else lost."""
    return EngineFull(details) if code == "RESOURCE_EXHAUSTED" else EngineLost(f"{code}: {details}")


def _hints(hints: tuple[PhraseHint, ...]) -> list[epb.PhraseHint]:
    return [epb.PhraseHint(text=h.text, boost=h.boost) for h in hints]
