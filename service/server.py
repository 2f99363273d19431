"""The voxgate server: start(), serve(), ordered shutdown(). Signal handlers only set an event.

Health: "" is liveness (SERVING while the process serves); "voxgate.v1.Speech"
is readiness (SERVING only while a new session can be admitted: the engine is up and has
headroom, the sidecar and the service have a free slot, and the server is not draining).
"""

from __future__ import annotations

import asyncio
import signal

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from engine_api.sockets import allow_open_files, private_umask
from voxgate_client.v1 import speech_pb2, speech_pb2_grpc

from . import compat, metrics, request_stream, tracing
from .api import SpeechServicer
from .audio.speech_model import shared_model
from .clock import Clock, SystemClock
from .config import Config
from .engine_pool import EnginePool
from .limits import TRANSPORT_WINDOW
from .peers import ResumeRelay, WorkerRole
from .security import Security
from .startup import start_unless_stopped
from .tenant_quota import SharedQuotas

log = structlog.get_logger("server")
# Clients may ping this often (the Python client pings every 20 s); gRPC's default, 5 min, answers
# a client's keepalive on a quiet stream with GOAWAY, which would cut live sessions.
CLIENT_MIN_PING_INTERVAL_MS = 10_000

SPEECH_SERVICE = speech_pb2.DESCRIPTOR.services_by_name["Speech"].full_name
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def keepalive_options(c: Config) -> list[tuple[str, int]]:
    """HTTP/2 keepalive: notice a client connection that died without a FIN/RST (NAT timeout, a proxy
    gone), so its session is detached and can be resumed on a new connection."""
    options = [("grpc.http2.min_ping_interval_without_data_ms", CLIENT_MIN_PING_INTERVAL_MS)]
    if c.keepalive_time_s > 0:
        options += [
            ("grpc.keepalive_time_ms", round(c.keepalive_time_s * 1000)),
            ("grpc.keepalive_timeout_ms", round(c.keepalive_timeout_s * 1000)),
            ("grpc.http2.ping_timeout_ms", round(c.keepalive_timeout_s * 1000)),  # what times a ping out
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),  # keep pinging while a session is silent
        ]
    return options


class Server:
    def __init__(self, config: Config, clock: Clock | None = None, worker: WorkerRole | None = None) -> None:
        self.config = config
        self._worker = worker  # one of `--workers N` (service/workers.py): shares the port, relays resumes
        self._security = Security(config)  # reads and checks the TLS and token files: bad ones fail the start
        self._health = health.aio.HealthServicer()
        # One engine sidecar, or several (--engines / --gpus): sessions are placed across them.
        self._pool = EnginePool(config, self._on_engine_ready, self._on_engine_status)
        relay = ResumeRelay(worker, config.max_message_bytes) if worker else None
        self._quotas = SharedQuotas(worker.quota_socket(), worker.index) if worker else None  # one count across workers
        self._speech = SpeechServicer(
            config, self._pool, clock or SystemClock(), self._refresh_readiness, relay, self._quotas
        )
        self._ready = False  # readiness as last set
        self._grpc: grpc.aio.Server | None = None
        self._stop = asyncio.Event()
        self._health_tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    def _set_health(self, service: str, serving: bool) -> None:
        task = asyncio.ensure_future(self._health.set(service, SERVING if serving else NOT_SERVING))
        self._health_tasks.add(task)
        task.add_done_callback(self._health_tasks.discard)

    def _on_engine_ready(self, ready: bool) -> None:
        log.info("engine_ready" if ready else "engine_not_ready")
        self._refresh_readiness()

    def _on_engine_status(self) -> None:
        self._speech.engine_status_heard()
        self._speech.audit_capacity()
        self._refresh_readiness()

    def _refresh_readiness(self) -> None:
        s = self._pool
        ready = s.serving and self._speech.has_room() and not self._speech.draining
        if ready != self._ready:
            self._ready = ready
            log.info(
                "readiness",
                serving=ready,
                engine_ready=s.ready,
                engine_admitting=s.admitting,
                sessions=self._speech.held,
            )
            self._set_health(SPEECH_SERVICE, ready)

    async def start(self) -> None:
        c = self.config
        if c.speech_detector == "silero":
            shared_model()  # a missing or altered model stops the start, naming the file and the fix
        allow_open_files()  # a client connection and a frames connection per session
        # Authentication first: an unauthenticated caller learns nothing, not even that its bytes were bad.
        interceptors = [*self._security.interceptors(), request_stream.MalformedUnaryRequests()]
        self._grpc = grpc.aio.server(
            interceptors=interceptors,
            options=[
                ("grpc.max_receive_message_length", c.max_message_bytes),
                ("grpc.so_reuseport", 1 if self._worker else 0),  # workers share the port; else a taken port fails
                # Fixed per-stream window: at most this much unread client audio sits in the
                # transport; beyond it HTTP/2 flow control holds the client.
                ("grpc.http2.bdp_probe", 0),
                ("grpc.http2.lookahead_bytes", TRANSPORT_WINDOW.value),  # larger messages still arrive, in parts
                *keepalive_options(c),
            ],
        )
        speech_pb2_grpc.add_SpeechServicer_to_server(self._speech, self._grpc)
        compat_services = compat.register(self._grpc, self._speech, c)  # Riva and Google STT, same sessions
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._grpc)
        reflection.enable_server_reflection(
            (SPEECH_SERVICE, *compat_services, health.SERVICE_NAME, reflection.SERVICE_NAME), self._grpc
        )
        address, credentials = f"{c.host}:{c.port}", self._security.credentials
        self.port = (
            self._grpc.add_secure_port(address, credentials) if credentials else self._grpc.add_insecure_port(address)
        )
        if self._worker:  # private: the other workers relay resumes of this one's sessions here
            with private_umask():
                self._grpc.add_insecure_port(f"unix:{self._worker.socket()}")
        self._security.warn_if_exposed(c.host)
        await self._health.set("", SERVING)
        await self._health.set(SPEECH_SERVICE, NOT_SERVING)
        await self._grpc.start()
        tracing.configure(c.otel_endpoint)
        metrics.serve_metrics(c.metrics_port, c.host, lambda: len(self._speech.sessions))
        print(f"voxgate listening on {c.host}:{self.port}", flush=True)
        log.info("listening", host=c.host, port=self.port, engine=c.engine, **self._security.describe())
        await self._pool.start()

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        loop.add_signal_handler(signal.SIGHUP, self._security.reload)  # new certificates and tokens, no restart
        try:
            if await start_unless_stopped(self.start(), self._stop):
                await self._stop.wait()
            else:
                log.info("stopped_while_starting")
        finally:
            await self.shutdown()

    async def shutdown(self) -> None:
        """Stop admitting, let sessions end with DRAINING and their finals, then stop everything."""
        c = self.config
        self._speech.draining = True
        self._ready = False
        await self._health.set(SPEECH_SERVICE, NOT_SERVING)
        log.info("draining", sessions=len(self._speech.sessions), grace_s=c.drain_grace_s)
        stopping = None
        if self._worker and self._grpc is not None:
            # One of several workers on the port: stop listening now (gRPC's stop closes the listeners and
            # sends GOAWAY at once, and lets the calls in progress run on), so that the clients of the
            # sessions it drains reconnect to a worker that admits them, not to this one again and again.
            stopping = asyncio.ensure_future(self._grpc.stop(grace=c.drain_grace_s + 1.0))
        await self._speech.drain(c.drain_grace_s)
        await self._health.enter_graceful_shutdown()
        if stopping is not None:
            await stopping
        elif self._grpc is not None:
            await self._grpc.stop(grace=1.0)
        if self._quotas is not None:
            await self._quotas.close()
        await self._pool.stop()
        log.info("stopped")
