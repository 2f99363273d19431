"""The public voxgate.v1.Speech servicer: validation, admission, and the session loop."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import grpc
import structlog

from voxgate_client._proto import speech_pb2 as pb
from voxgate_client._proto import speech_pb2_grpc

from . import errors, proto_edge
from .clock import Clock
from .config import Config
from .events import ClientInput
from .session import RecognizeSession
from .session_config import ENCODINGS, MAX_CHANNELS, MAX_RATE_HZ, MIN_RATE_HZ, validate
from .sidecar import SidecarSupervisor

log = structlog.get_logger("api")


class SpeechServicer(speech_pb2_grpc.SpeechServicer):
    def __init__(self, config: Config, supervisor: SidecarSupervisor, clock: Clock) -> None:
        self._config = config
        self._supervisor = supervisor
        self._clock = clock
        self.sessions: set[RecognizeSession] = set()
        self._no_sessions = asyncio.Event()
        self._no_sessions.set()
        self.draining = False

    async def wait_sessions_ended(self, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(self._no_sessions.wait(), timeout_s)
            return True
        except TimeoutError:
            return False

    def _languages(self) -> tuple[str, ...]:
        status = self._supervisor.status
        return tuple(status.languages) if status else ()

    def _admit(self) -> None:
        c = self._config
        if self.draining:
            raise errors.unavailable(errors.DRAINING, "server is draining; connect to another instance",
                                     c.retry_delay_s)
        if not self._supervisor.ready or self._supervisor.stub is None:
            raise errors.unavailable(errors.ENGINE_UNAVAILABLE, "speech engine is starting or restarting",
                                     c.retry_delay_s)
        if len(self.sessions) >= c.max_sessions:
            raise errors.unavailable(errors.CAPACITY, f"all {c.max_sessions} sessions are in use",
                                     c.retry_delay_s)

    async def StreamingRecognize(
        self, request_iterator: AsyncIterator[pb.StreamingRecognizeRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.StreamingRecognizeResponse]:
        session_id = uuid.uuid4().hex
        structlog.contextvars.bind_contextvars(session_id=session_id, peer=context.peer())
        session: RecognizeSession | None = None
        seq = 0
        try:
            first = await anext(aiter(request_iterator), None)
            if first is None:
                return
            if first.WhichOneof("request") != "config":
                raise errors.protocol_order(
                    f"the first request must carry config; got {first.WhichOneof('request') or 'an empty request'}")
            cfg = validate(first.config, self._config, self._languages())
            self._admit()
            assert self._supervisor.stub is not None
            session = RecognizeSession(session_id, cfg, self._config, self._supervisor.stub, self._clock)
            started = await session.open()
            self.sessions.add(session)
            self._no_sessions.clear()
            log.info("session_started", encoding=cfg.encoding.value, sample_rate_hz=cfg.sample_rate_hz)
            max_bytes = self._config.max_audio_bytes_per_message
            seq += 1
            yield proto_edge.response(started, seq, cfg, max_bytes)
            async for out in session.run(_inputs(request_iterator)):
                seq += 1
                yield proto_edge.response(out, seq, cfg, max_bytes)
        except errors.StreamError as exc:
            log.info("session_error", code=exc.code.name, reason=exc.reason, error=exc.message)
            await context.abort(exc.code, exc.message, trailing_metadata=exc.trailing_metadata())
        finally:
            if session is not None:
                self.sessions.discard(session)
                if not self.sessions:
                    self._no_sessions.set()
            log.info("session_finished", responses=seq)
            structlog.contextvars.unbind_contextvars("session_id", "peer")

    async def GetCapabilities(
        self, request: pb.GetCapabilitiesRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetCapabilitiesResponse:
        c = self._config
        status = self._supervisor.status
        return pb.GetCapabilitiesResponse(
            encodings=list(ENCODINGS), min_sample_rate_hz=MIN_RATE_HZ, max_sample_rate_hz=MAX_RATE_HZ,
            max_audio_channel_count=MAX_CHANNELS, languages=list(self._languages()),
            engine=pb.EngineInfo(name=status.engine if status else c.engine,
                                 model=status.model if status else c.model),
            max_limits=proto_edge.session_limits(c.max_session_duration_s, c.max_idle_timeout_s),
            max_audio_bytes_per_message=c.max_audio_bytes_per_message,
            max_sessions=c.max_sessions, active_sessions=len(self.sessions))


async def _inputs(requests: AsyncIterator[pb.StreamingRecognizeRequest]) -> AsyncIterator[ClientInput]:
    async for msg in requests:
        yield proto_edge.client_input(msg)
