"""The public voxgate.v1.Speech servicer: validation, admission, resume, and the session loop."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

import grpc
import structlog
from google.protobuf.message import DecodeError

from voxgate_client.v1 import speech_pb2 as pb
from voxgate_client.v1 import speech_pb2_grpc

from . import errors, metrics, phrase_hints, proto_edge, request_stream, tracing
from .audio.decode import Encoding
from .capacity import CapacityAudit, CapacityCounts
from .clock import Clock
from .config import Config
from .engine_pool import EnginePool
from .events import ClientInput, Ended, SessionOutput
from .peers import ResumeRelay
from .security import Tenant, current_tenant
from .session.channels import AnySession, new_session
from .session.engine_source import EngineSource
from .session.sidecar_engines import SidecarEngines
from .session_config import MAX_CHANNELS, MAX_RATE_HZ, MIN_RATE_HZ, SessionConfig, validate
from .tenant_quota import LocalQuotas, QuotaLedgerUnreachable, Quotas, ServiceSessions

log = structlog.get_logger("api")
CAPABILITIES_WAIT_S = 2.0  # GetCapabilities before any engine status waits this long for one
QUOTA_GIVE_WAIT_S = 2.0  # a session's end waits at most this for the workers' parent to take its quota back


class SpeechServicer(speech_pb2_grpc.SpeechServicer):
    def __init__(
        self,
        config: Config,
        pool: EnginePool,
        clock: Clock,
        on_capacity_change: Callable[[], None] = lambda: None,
        relay: ResumeRelay | None = None,
        quotas: Quotas | None = None,
    ) -> None:
        self._config = config
        self._quotas: Quotas = quotas or LocalQuotas()  # per-tenant session counts (the parent's, for workers)
        self._relay = relay  # one of several workers: resumes of the others' sessions go to their owner
        self._pool = pool
        self._engines: EngineSource = SidecarEngines(pool)
        self._clock = clock
        self._sessions: dict[str, AnySession] = {}  # by resume token; detached ones included
        self._tenant_of: dict[str, str] = {}  # session id → tenant, from admission to the session's end
        self._status_heard = asyncio.Event()  # an engine's status came (GetCapabilities waits a moment for it)
        self._quota_gives: dict[str, asyncio.Future[dict[str, object]]] = {}  # session id → its give, until answered
        self._slots_of: dict[str, int] = {}  # session id → sessions it counts as (one per recognized channel)
        self._starting = 0  # admitted sessions still opening their engine link (not yet in _sessions)
        self._no_sessions = asyncio.Event()
        self._no_sessions.set()
        self._on_capacity_change = on_capacity_change  # a session was admitted or ended: readiness may change
        self.capacity = CapacityAudit(clock, config.sidecar_health_interval_s)
        self._audit: asyncio.Future[None] | None = None  # a worker's audit, waiting for the service's count
        self.draining = False

    @property
    def sessions(self) -> list[AnySession]:
        return list(self._sessions.values())

    def _languages(self) -> tuple[str, ...]:
        status = self._pool.status
        return tuple(status.languages) if status else ()

    @property
    def held(self) -> int:
        """Sessions holding a slot: starting, live, and detached ones waiting for a resume."""
        return sum(self._slots_of.get(s.session_id, 1) for s in self._sessions.values()) + self._starting

    def _limit(self) -> int:
        """--max-sessions, or less when the engines up hold fewer (each engine's max_sessions; 0: unbounded)."""
        bounds = [s.max_sessions for s in self._pool.statuses()]
        if not bounds or not all(bounds):
            return self._config.max_sessions
        return min(self._config.max_sessions, sum(bounds))

    def has_room(self) -> bool:
        return self.held < self._limit()

    def _held_changed(self) -> None:
        """A session was admitted or ended: readiness may change, and the service-wide count (workers)."""
        self._quotas.report(self.held)
        self._on_capacity_change()

    async def service_sessions(self) -> ServiceSessions:
        """Sessions the whole service holds: this process's, or every worker's (their parent's count)."""
        try:
            return await self._quotas.service_sessions(self.held)
        except QuotaLedgerUnreachable:  # the parent is gone: this worker is being stopped
            return ServiceSessions(self.held)

    def capacity_counts(self, service: int | None = None) -> CapacityCounts:
        statuses = self._pool.statuses()  # the engines up: a dead one's sessions are moving elsewhere
        return CapacityCounts(
            service=self.held if service is None else service,
            sidecar=sum(s.active_sessions for s in statuses),
            engine=sum(s.counters.get("sessions_active", 0) for s in statuses),
            opening=sum(s.opening_sessions for s in statuses),
        )

    def audit_capacity(self) -> None:
        """After a sidecar status: compare the three counts (see service/capacity.py). A worker compares the
        whole service's sessions with the sidecar's, which counts every worker's."""
        if self._relay is None:
            self.capacity.check(self.capacity_counts())
        elif self._audit is None or self._audit.done():
            self._audit = asyncio.ensure_future(self._audit_service())

    async def _audit_service(self) -> None:
        self.capacity.check(self.capacity_counts((await self.service_sessions()).total))

    def engine_status_heard(self) -> None:
        self._status_heard.set()

    def _admit(self, slots: int = 1) -> None:
        """All of a session's `slots` or none (the tenant's quota is asked after: _take_quota)."""
        c = self._config
        if self.draining:
            raise errors.unavailable(
                errors.DRAINING, "server is draining; connect to another instance", c.retry_delay_s
            )
        if not self._pool.ready:
            raise errors.unavailable(
                errors.ENGINE_UNAVAILABLE, "speech engine is starting or restarting", c.retry_delay_s
            )
        limit = self._limit()
        if self.held + slots > limit:
            raise errors.unavailable(errors.CAPACITY, capacity_refusal(slots, self.held, limit), c.retry_delay_s)

    def _give_quota(self, session_id: str) -> None:
        given = self._quotas.give_back(session_id)
        if given is not None:  # the parent's book: the session's end waits for it (_quota_given)
            self._quota_gives[session_id] = given
            given.add_done_callback(lambda _: self._quota_gives.pop(session_id, None))

    async def _quota_given(self, session_id: str) -> None:
        """Until the parent's book has the session's slots back, so that its client, once it sees the end, may
        start another session on any worker (as on one process, where that is so at once)."""
        given = self._quota_gives.get(session_id)
        if given is not None:
            with contextlib.suppress(Exception):  # lost: the parent gave back all of this worker's slots
                await asyncio.wait_for(asyncio.shield(given), QUOTA_GIVE_WAIT_S)

    async def _take_quota(self, session_id: str, tenant: Tenant, slots: int) -> None:
        """The tenant's quota, counted across every worker of this service."""
        quota = tenant.max_sessions or self._config.tenant_max_sessions
        try:
            taken = await self._quotas.take(session_id, tenant.name, slots, quota)
        except QuotaLedgerUnreachable as exc:  # the parent is gone: this worker is being stopped
            log.error("tenant_quota_ledger_unreachable", error=str(exc))
            raise errors.unavailable(
                errors.DRAINING,
                "this server is stopping (its worker supervisor is gone); connect again",
                self._config.retry_delay_s,
            ) from exc
        if not taken:
            raise errors.session_quota(tenant.name, quota)
        self._tenant_of[session_id] = tenant.name  # counts against the quota while it starts, too

    def _session_ended(self, session: AnySession) -> None:
        self._sessions.pop(session.resume_token, None)
        if self._tenant_of.pop(session.session_id, None) is not None:
            self._give_quota(session.session_id)
        self._slots_of.pop(session.session_id, None)
        session.record_metrics()
        if not self._sessions:
            self._no_sessions.set()
        self._pool.check_soon()  # engines not admitting, maybe for want of a slot: see that one is free now
        self._held_changed()

    async def _open(self, msg: pb.StreamingConfig) -> tuple[AnySession, int]:
        """A new session, or the one `resume_token` names; and the seq to continue after."""
        tenant = current_tenant()
        if msg.resume_token:
            session = self._sessions.get(msg.resume_token)
            if (
                session is None
                or session.ended
                or self._tenant_of.get(session.session_id, "") != (tenant.name if tenant else "")
            ):
                raise errors.StreamError(
                    grpc.StatusCode.NOT_FOUND,
                    errors.SESSION_NOT_FOUND,
                    "no session to resume with this token: unknown, ended, or its resume window passed",
                    field="config.resume_token",
                )
            session.attach(msg.resume_audio_bytes, msg.resume_last_seq)
            structlog.contextvars.bind_contextvars(session_id=session.session_id)
            log.info("session_resumed", after_seq=msg.resume_last_seq, audio_bytes=msg.resume_audio_bytes)
            return session, msg.resume_last_seq
        cfg = validate(msg, self._config, self._languages())
        self._admit(cfg.slots)
        session_id = uuid.uuid4().hex
        structlog.contextvars.bind_contextvars(session_id=session_id)
        self._slots_of[session_id] = cfg.slots
        self._starting += cfg.slots  # holds its slots while it starts: a burst cannot all pass _admit at once
        self._held_changed()
        try:
            if tenant is not None:
                await self._take_quota(session_id, tenant, cfg.slots)
            session = new_session(
                session_id,
                cfg,
                self._config,
                self._engines,
                self._clock,
                self._session_ended,
                token_prefix=self._relay.role.token_prefix if self._relay else "",
            )
            started = await session.start()
        except BaseException:  # refused, failed, or the client hung up meanwhile (start() closed its link)
            if tenant is not None:  # also where the take was cancelled before it answered
                self._tenant_of.pop(session_id, None)
                self._give_quota(session_id)
            self._slots_of.pop(session_id, None)
            self._starting -= cfg.slots
            self._held_changed()
            raise
        self._starting -= cfg.slots  # from here on _sessions holds it, with no await in between
        metrics.SESSIONS_STARTED.inc()
        tracing.session_started(
            session.session_id,
            {
                "voxgate.encoding": cfg.encoding.value,
                "voxgate.sample_rate_hz": cfg.sample_rate_hz,
                "voxgate.language": cfg.language_code,
                "voxgate.engine": started.engine,
            },
        )
        self._sessions[session.resume_token] = session
        self._no_sessions.clear()
        session.attach(None)
        log.info("session_started", encoding=cfg.encoding.value, sample_rate_hz=cfg.sample_rate_hz)
        return session, 0

    async def run_session(
        self, config: pb.StreamingConfig, inputs: AsyncIterator[ClientInput]
    ) -> AsyncIterator[tuple[int, SessionOutput, SessionConfig]]:
        """Open or resume a session and run it for one client stream: (seq, output, config) until it ends.

        Raises StreamError for a refused session, or after the last output of a session that ended on an error.
        """
        session, after_seq = await self._open(config)
        reader = asyncio.create_task(session.consume(inputs))
        completed = False
        try:
            if config.resume_token and session.started is not None:
                # Out of band (seq 0, not in the replayable log): this stream continues an existing session.
                yield 0, replace(session.started, resumed=True), session.cfg
            async for entry in session.log.read(after_seq):
                if isinstance(entry.item, Ended):
                    await self._quota_given(session.session_id)
                yield entry.seq, entry.item, session.cfg
            completed = True
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            if not completed:
                if session.has_audio:
                    session.detach()  # the client vanished: it may resume
                else:
                    await session.abandon()  # nothing to resume: its slot is free at once (docs/reliability.md)
        if session.error is not None:
            raise session.error

    async def StreamingRecognize(
        self, request_iterator: AsyncIterator[pb.StreamingRecognizeRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.StreamingRecognizeResponse]:
        structlog.contextvars.bind_contextvars(peer=context.peer())
        responses = 0
        try:
            requests = aiter(request_iterator)
            first = await request_stream.next_request(requests, "the first request")
            if first is None:
                raise errors.protocol_order("the stream ended without a request: the first request must carry config")
            if first.WhichOneof("request") != "config":
                raise errors.protocol_order(
                    f"the first request must carry config; got {first.WhichOneof('request') or 'an empty request'}"
                )
            if self._relay and (owner := self._relay.role.owner_of(first.config.resume_token)) is not None:
                async for response in self._relay.relay(owner, first, requests, context):
                    responses += 1
                    yield response
                return
            max_bytes = self._config.max_audio_bytes_per_message
            async for seq, out, cfg in self.run_session(first.config, _inputs(requests)):
                responses += 1
                yield proto_edge.response(out, seq, cfg, max_bytes)
        except errors.StreamError as exc:
            log.info("session_error", code=exc.code.name, reason=exc.reason, error=exc.message)
            metrics.REJECTED.labels(exc.reason).inc()
            await context.abort(exc.code, exc.message, trailing_metadata=exc.trailing_metadata())
        finally:
            log.info("stream_finished", responses=responses)
            structlog.contextvars.unbind_contextvars("session_id", "peer")

    async def GetCapabilities(
        self, request: pb.GetCapabilitiesRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetCapabilitiesResponse:
        c = self._config
        if self._pool.status is None:  # just started (a worker, a restart): its engine's status is a moment away
            remaining = context.time_remaining()
            wait_s = min(CAPABILITIES_WAIT_S, remaining if remaining is not None else CAPABILITIES_WAIT_S)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._status_heard.wait(), max(0.0, wait_s - 0.1))
        status = self._pool.status  # still None: no engine has answered yet (no languages to say)
        return pb.GetCapabilitiesResponse(
            encodings=[e.proto for e in Encoding],
            min_sample_rate_hz=MIN_RATE_HZ,
            max_sample_rate_hz=MAX_RATE_HZ,
            max_audio_channel_count=MAX_CHANNELS,
            languages=list(self._languages()),
            engine=pb.EngineInfo(name=status.engine if status else c.engine, model=status.model if status else c.model),
            max_limits=proto_edge.session_limits(c.max_session_duration_s, c.max_idle_timeout_s),
            max_audio_bytes_per_message=c.max_audio_bytes_per_message,
            max_sessions=self._limit(),
            active_sessions=(service := await self.service_sessions()).total,
            capacity=proto_edge.capacity(
                self.capacity_counts(service.total),
                self.capacity.mismatches,
                service.by_worker,
                self._pool.engine_rows(),
            ),
            position_mode=proto_edge.position_mode(status.position_mode if status else ""),
            position_mode_reason=status.position_mode_reason if status else "",
            position_runtime=proto_edge.position_runtime(status),
            interim_stability=proto_edge.interim_stability(status.interim_stability if status else ""),
            phrase_hints=phrase_hints.capabilities(status.phrase_hints if status else None),
        )

    async def drain(self, grace_s: float) -> None:
        """Refuse new sessions; live ones end with DRAINING and their finals; stragglers are closed."""
        self.draining = True
        for session in self.sessions:  # each at the end of its utterance in progress, within half the grace
            session.drain(grace_s * DRAIN_AT_ENDPOINT_SHARE)
        # A worker also waits for the resumes it relays: their owner drains them at the same time.
        ends = [self._no_sessions.wait(), *([self._relay.idle()] if self._relay else [])]
        try:
            await asyncio.wait_for(asyncio.gather(*ends), grace_s)
        except TimeoutError:
            log.warning("drain_grace_expired", sessions=len(self._sessions))
            for session in self.sessions:
                await session.close_now()


async def _inputs(requests: AsyncIterator[pb.StreamingRecognizeRequest]) -> AsyncIterator[ClientInput]:
    try:
        async for msg in requests:
            yield proto_edge.client_input(msg)
    except DecodeError as exc:  # gRPC could not decode a request; the stream ends there (request_stream)
        raise request_stream.malformed(exc) from exc


DRAIN_AT_ENDPOINT_SHARE = 0.5  # of the drain grace, spent waiting for utterances to end; the rest for finals


def capacity_refusal(asked: int, held: int, limit: int) -> str:
    """What was asked and what is free: a multichannel session takes a slot per channel."""
    free = max(limit - held, 0)
    if asked == 1:
        return f"all {limit} sessions are in use"
    return f"{asked} sessions asked for (one per channel) but {free} of {limit} are free"
