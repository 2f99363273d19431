"""The sidecar's face: a status call on gRPC, and one engine session per frames connection (frames.py).

`run_session` drives one session; how it ends early is a `SessionEnded`, which frames.py sends as the
connection's last message.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncGenerator, AsyncIterator, Iterable

import grpc
import structlog

from engine_api.phrases import PhraseHint
from engine_api.v1 import engine_pb2 as pb
from engine_api.v1 import engine_pb2_grpc
from engine_api.wire import opened_to_proto, output_to_proto, status_to_proto
from engine_sidecar.engines.engine import Engine, EngineSession

log = structlog.get_logger("sidecar")


class EngineServicer(engine_pb2_grpc.EngineServicer):
    def __init__(self, engine: Engine, frontend_sockets: tuple[str, ...] = ()) -> None:
        self._engine = engine
        self._frontend_sockets = frontend_sockets
        self._active = 0
        self._opening = 0  # of _active: slots whose engine session is still being opened

    async def GetStatus(self, request: pb.GetStatusRequest, context: grpc.aio.ServicerContext) -> pb.GetStatusResponse:
        return status_to_proto(
            self._engine.info,
            self._engine.status(),
            self._engine.counters(),
            active_sessions=self._active,
            opening_sessions=self._opening,
            pid=os.getpid(),
            frontend_sockets=self._frontend_sockets,
        )

    async def run_session(self, requests: AsyncIterator[pb.SessionInput]) -> AsyncGenerator[pb.SessionOutput, None]:
        """One engine session driven by `requests`: Opened, then its outputs. Raises SessionEnded when refused
        or when the engine failed it; whoever stops iterating (a cancel, a hang-up) aborts it."""
        first = await anext(aiter(requests), None)
        if first is None or first.WhichOneof("input") != "open":
            raise SessionEnded("FAILED_PRECONDITION", "first message must be open")
        if self._active >= self._engine.info.max_sessions:
            raise SessionEnded("RESOURCE_EXHAUSTED", "engine is at max_sessions")
        if not (status := self._engine.status()).admitting:
            raise SessionEnded("RESOURCE_EXHAUSTED", status.refusal or "engine is not admitting")
        # The slot is taken here and given back in the finally below, on every path: a cancel or an error
        # while the engine opens the session included (the one place `_active` changes).
        self._active += 1
        session: EngineSession | None = None
        feeder: asyncio.Task[str | None] | None = None
        finished = False
        try:
            self._opening += 1
            try:
                hints = _hints(first.open.phrase_hints)
                session = await self._engine.open_session(first.open.session_id, first.open.language_code, hints)
            finally:
                self._opening -= 1
            log.info("session_opened", session_id=first.open.session_id)
            feeder = asyncio.create_task(self._feed(requests, session))
            yield opened_to_proto(self._engine.info)
            async for out in session.outputs():
                yield output_to_proto(out)
            error = await feeder
            if error is not None:
                # ABORTED (not INTERNAL, which transports also produce) = "the engine failed this session".
                raise SessionEnded("ABORTED", f"engine error: {error}")
            finished = True
        finally:
            self._active -= 1
            if not finished:
                if feeder is not None:
                    feeder.cancel()
                if session is not None:
                    await session.abort()
            log.info("session_closed", session_id=first.open.session_id, completed=finished, opened=session is not None)

    async def _feed(self, requests: AsyncIterator[pb.SessionInput], session: EngineSession) -> str | None:
        """Drive the session from the service's input; an engine failure aborts it and is returned."""
        try:
            await self._drive(requests, session)
        except Exception as exc:
            log.exception("engine_session_failed")
            await session.abort()
            return repr(exc)
        return None

    async def _drive(self, requests: AsyncIterator[pb.SessionInput], session: EngineSession) -> None:
        async for msg in requests:
            kind = msg.WhichOneof("input")
            if kind == "audio":
                await session.push_audio(msg.audio.pcm16, msg.audio.speech)
            elif kind == "flush":
                await session.flush(msg.flush.marker)
            elif kind == "phrase_hints":
                await session.set_phrase_hints(_hints(msg.phrase_hints.hints))
            elif kind == "close":
                await session.close()
                return
        # The service went away without closing: drop the session.
        await session.abort()


def _hints(given: Iterable[pb.PhraseHint]) -> tuple[PhraseHint, ...]:
    return tuple(PhraseHint(h.text, h.boost) for h in given)


class SessionEnded(Exception):
    """A session ends early: `code` is the gRPC status code's name the Session call ends with."""

    def __init__(self, code: str, details: str) -> None:
        super().__init__(f"{code}: {details}")
        self.code = code
        self.details = details
