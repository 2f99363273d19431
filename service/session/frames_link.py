"""A session's engine stream on the sidecar's frames socket (engine_api/frames.py): one connection per stream.

Everything a GrpcLink does, told the frames' way: a refusal or failure is the `Ended` message the sidecar
sends last; a connection that closes or breaks without one is a sidecar gone (EngineLost); dropping the
stream is closing the connection, which the sidecar takes as a cancel.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from engine_api.frames import OK, READ_LIMIT_BYTES, FrameError, frame, parse_output, read_frame, tune
from engine_api.v1 import engine_pb2 as epb
from engine_api.v1 import engine_pb2_grpc

from .engine_link import EngineLink, open_refusal, stream_failure
from .engine_source import EngineLost


class FramesLink(EngineLink):
    def __init__(self, stub: engine_pb2_grpc.EngineStub, path: Path, session_id: str, language: str,
                 base_ms: int) -> None:
        super().__init__(stub, session_id, language, base_ms)
        self._path = path
        self._reader_stream: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._ended = False  # the sidecar's Ended arrived, or the connection closed or broke

    async def open(self, timeout_s: float) -> None:
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
