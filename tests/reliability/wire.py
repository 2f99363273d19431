"""Wire-level helpers for the chaos fuzz: raw-bytes streams on three APIs, and server-wide invariants.

A stream here is sent as bytes (identity serializer), so a test can put anything on the wire:
garbage, truncated protobuf, invalid UTF-8. The server side is a real `voxgate serve` with a
known sidecar socket, so the three session counters (service, sidecar slots, engine) can be read.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import psutil
from google.cloud import speech_v1 as gspeech
from google.protobuf.message import DecodeError
from grpc_health.v1 import health_pb2
from riva.client.proto import riva_asr_pb2 as rasr
from riva.client.proto import riva_audio_pb2 as raudio

from engine_api.v1 import engine_pb2, engine_pb2_grpc
from engine_sidecar.engines.voxtral.frontend_client import frontend_sockets
from service.sidecar import NOT_ADMITTING_STATUS_INTERVAL_S
from tests.helpers import (
    ServerProcess,
    ServiceWorker,
    error_reason,
    service_workers,
    sidecar_children,
    start_server,
)
from voxgate_client.v1 import speech_pb2 as pb
from voxgate_client.v1 import speech_pb2_grpc as pb_grpc

MALFORMED = "MALFORMED_REQUEST"  # the reason issue 17 asks for; not in pb.ErrorReason yet on every tree
REASONS = (set(pb.ErrorReason.keys()) - {"ERROR_REASON_UNSPECIFIED"}) | {MALFORMED}
MAX_LOG_LINE = 16 * 1024  # one log line; a 1 MB language_code must not become a 1 MB line
MAX_STATUS_DETAILS = 2048  # status message and ErrorInfo metadata echo client input only bounded
# A worker learns of slots freed by another worker's sessions at its next engine status, asked this often while
# its engine is full (service/sidecar.py); the rest is room for a busy box.
WORKER_READINESS_LAG_S = NOT_ADMITTING_STATUS_INTERVAL_S + 1.0
# An exception that escaped structlog (a JSON line with an "exception" field is a handled, logged error).
# A capacity_mismatch is a leaked slot, or an audit that cries wolf: both are failures here.
LOG_ALARMS = (b"Task exception was never retrieved", b"Exception in callback", b'"event": "capacity_mismatch"')


# -- the three APIs, as bytes ------------------------------------------------------------------


@dataclass(frozen=True)
class Api:
    """One StreamingRecognize flavour: how to build its requests as bytes, and whether bytes decode."""

    name: str
    method: str
    config: Callable[[str], bytes]  # language_code -> the first request
    audio: Callable[[bytes], bytes]
    keep_alive: Callable[[], bytes]
    decodes: Callable[[bytes], bool]
    has_session_events: bool  # voxgate.v1 only: SessionStarted / SessionEnded / Warning on the wire


def _decodes(parse: Callable[[bytes], object]) -> Callable[[bytes], bool]:
    def check(data: bytes) -> bool:
        try:
            parse(data)
        except (DecodeError, ValueError, TypeError):
            return False
        return True

    return check


def _voxgate_config(language: str) -> bytes:
    return pb.StreamingRecognizeRequest(
        config=pb.StreamingConfig(
            encoding=pb.AUDIO_ENCODING_LINEAR16,
            sample_rate_hz=16000,
            interim_results=True,
            enable_word_time_offsets=True,
            language_code=language,
        )
    ).SerializeToString()


def _riva_config(language: str) -> bytes:
    return rasr.StreamingRecognizeRequest(
        streaming_config=rasr.StreamingRecognitionConfig(
            config=rasr.RecognitionConfig(
                encoding=raudio.LINEAR_PCM,
                sample_rate_hertz=16000,
                language_code=language,
                audio_channel_count=1,
                max_alternatives=1,
            ),
            interim_results=True,
        )
    ).SerializeToString()


_GReq = gspeech.StreamingRecognizeRequest


def _google_config(language: str) -> bytes:
    return _GReq.serialize(
        _GReq(
            streaming_config=gspeech.StreamingRecognitionConfig(
                config=gspeech.RecognitionConfig(
                    encoding=gspeech.RecognitionConfig.AudioEncoding.LINEAR16,
                    sample_rate_hertz=16000,
                    language_code=language,
                ),
                interim_results=True,
            )
        )
    )


APIS = {
    "voxgate": Api(
        "voxgate",
        "/voxgate.v1.Speech/StreamingRecognize",
        _voxgate_config,
        lambda a: pb.StreamingRecognizeRequest(audio=a).SerializeToString(),
        lambda: pb.StreamingRecognizeRequest(keep_alive=pb.KeepAlive()).SerializeToString(),
        _decodes(pb.StreamingRecognizeRequest.FromString),
        True,
    ),
    "riva": Api(
        "riva",
        "/nvidia.riva.asr.RivaSpeechRecognition/StreamingRecognize",
        _riva_config,
        lambda a: rasr.StreamingRecognizeRequest(audio_content=a).SerializeToString(),
        lambda: rasr.StreamingRecognizeRequest().SerializeToString(),  # no audio: a keep-alive
        _decodes(rasr.StreamingRecognizeRequest.FromString),
        False,
    ),
    "google": Api(
        "google",
        "/google.cloud.speech.v1.Speech/StreamingRecognize",
        _google_config,
        lambda a: _GReq.serialize(_GReq(audio_content=a)),
        lambda: _GReq.serialize(_GReq(audio_content=b"")),
        _decodes(_GReq.pb().FromString),
        False,
    ),
}


def invalid_utf8_config(api: Api) -> bytes:
    """A config whose language_code is not UTF-8: same length as a valid one, so the framing stays valid."""
    good = api.config("en-US")
    return good.replace(b"en-US", b"en-\xff\xfe", 1)


# -- one raw stream --------------------------------------------------------------------------------


@dataclass
class Outcome:
    responses: list[bytes] = field(default_factory=list)
    code: grpc.StatusCode = grpc.StatusCode.OK
    reason: str = ""
    details: str = ""
    meta_bytes: int = 0  # size of ErrorInfo metadata values
    took_s: float = 0.0
    cancelled_by_us: bool = False

    def parsed(self) -> list[pb.StreamingRecognizeResponse]:
        return [pb.StreamingRecognizeResponse.FromString(r) for r in self.responses]


def _identity(b: bytes) -> bytes:
    return b


class RawStream:
    """One StreamingRecognize call on its own channel (so a cut or a vanish hits no other stream)."""

    def __init__(
        self, target: str, api: Api, requests: Callable[[threading.Event], Iterator[bytes]], timeout: float
    ) -> None:
        """`requests(done)` makes the request iterator; `done` is set once the call is over."""
        self.channel = grpc.insecure_channel(target)
        multi = self.channel.stream_stream(api.method, request_serializer=_identity, response_deserializer=_identity)
        self.started = time.monotonic()
        self.outcome = Outcome()
        self.done = threading.Event()
        self.call = multi(requests(self.done), timeout=timeout)
        self.call.add_done_callback(lambda _c: self.done.set())

    def cancel(self) -> None:
        if not self.done.is_set():
            self.outcome.cancelled_by_us = True
        self.call.cancel()

    def read(self, limit: int | None = None) -> bool:
        """Read responses (`limit` of them, or to the end); False once the stream has ended."""
        try:
            for n, r in enumerate(self.call, 1):
                self.outcome.responses.append(r)
                if limit is not None and n >= limit:
                    return True
        except grpc.RpcError as exc:
            code, reason, meta = error_reason(exc)
            self.outcome.code, self.outcome.reason = code, reason
            self.outcome.details = exc.details() or ""
            self.outcome.meta_bytes = sum(len(k) + len(v) for k, v in meta.items())
        return False

    def finish(self) -> Outcome:
        self.read()
        self.outcome.took_s = time.monotonic() - self.started
        self.channel.close()
        return self.outcome


def paced(items: list[bytes | float] | list[bytes], done: threading.Event) -> Iterator[bytes]:
    """Requests with waits in between (a float is a pause in seconds); stops early once the call is over."""
    for item in items:
        if not isinstance(item, bytes):
            if done.wait(item):
                return
        else:
            yield item


def held_open(items: Iterator[bytes], done: threading.Event, hold_s: float) -> Iterator[bytes]:
    """The requests, then no half-close: the client keeps its side open until the call ends."""
    yield from items
    done.wait(hold_s)


# -- the server and its invariants -------------------------------------------------------------


@dataclass
class Counts:
    service: int
    sidecar: int
    engine: int

    def zero(self) -> bool:
        return self.service == self.sidecar == self.engine == 0


class WireServer:
    """A `voxgate serve` under fuzz: its counters, readiness, log and memory, read from outside."""

    def __init__(
        self,
        tmp: Path,
        name: str,
        engine: str,
        model: str,
        args: tuple[str, ...],
        ready_timeout_s: float = 60.0,
        workers: int = 1,
        engines: int = 1,
        frontends: int = 1,
    ) -> None:
        self.name, self.engine, self._tmp, self._model, self._args = name, engine, tmp, model, args
        self._ready_timeout_s = ready_timeout_s
        self._workers = workers  # > 1: `--workers N`, each worker's own count summed, each worker watched
        self._engines = engines  # > 1: `--engines N`, each sidecar's counts summed, each sidecar watched
        self._frontends = frontends  # > 1: `frontends=K` (one sidecar, K front ends), each front end's counts summed
        self.service_workers: list[ServiceWorker] = []
        self.frontend_pids: list[int] = []
        self.restarts = 0
        self.rss_peak: dict[str, int] = {}  # over every process this server had
        self._start()

    def _start(self) -> None:
        self.socket = self._tmp / f"{self.name}-{os.getpid()}-{self.restarts}.sock"  # a soak dir outlives runs
        workers = ("--workers", str(self._workers)) if self._workers > 1 else ()
        engines = ("--engines", str(self._engines)) if self._engines > 1 else ()
        frontends = ("--engine-option", f"frontends={self._frontends}") if self._frontends > 1 else ()
        self.proc: ServerProcess = start_server(
            self._tmp,
            *self._args,
            *workers,
            *engines,
            *frontends,
            "--sidecar-socket",
            str(self.socket),
            engine=self.engine,
            model=self._model,
            ready_timeout_s=self._ready_timeout_s,
        )
        if self._workers > 1:  # the supervisor runs the sidecar at engine.sock in its own directory
            self.service_workers = service_workers(self.proc.proc.pid)
            assert len(self.service_workers) == self._workers, self.service_workers
            self.socket = Path(self.service_workers[0].peer_dir) / "engine.sock"
        # several engines: socket S is S.0, S.1, … (one sidecar each)
        self.engine_sockets = (
            [self.socket]
            if self._engines == 1
            else [self.socket.with_name(f"{self.socket.name}.{i}") for i in range(self._engines)]
        )
        if self._frontends > 1:  # front end i of the one sidecar serves on S.i (S itself for 0)
            self.engine_sockets = [Path(s) for s in frontend_sockets(str(self.socket), self._frontends)]
            self.frontend_pids = self._frontend_pids(self._ready_timeout_s)
        self._log_offset = 0
        self.rss_base: dict[str, int] = {}

    def _frontend_pids(self, timeout_s: float) -> list[int]:
        """Each front end's pid from its own GetStatus, once all answer (the service serves once one does)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                pids = []
                for socket in self.engine_sockets:
                    with grpc.insecure_channel(f"unix:{socket}") as ch:
                        pids.append(
                            engine_pb2_grpc.EngineStub(ch).GetStatus(engine_pb2.GetStatusRequest(), timeout=5).pid
                        )
                return pids
            except grpc.RpcError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def restart(self) -> None:
        """After a broken state (a leak that wedges it): a fresh process, so the fuzz can go on."""
        self.proc.stop()
        self.restarts += 1
        self._start()

    @property
    def target(self) -> str:
        return self.proc.target

    def counts(self) -> Counts:
        sidecar = engine = 0
        for socket in self.engine_sockets:
            with grpc.insecure_channel(f"unix:{socket}") as ch:
                status = engine_pb2_grpc.EngineStub(ch).GetStatus(engine_pb2.GetStatusRequest(), timeout=5)
            sidecar += status.active_sessions
            engine += status.counters.get("sessions_active", 0)
        return Counts(self._service_sessions(), sidecar, engine)

    def _service_sessions(self) -> int:
        """Sessions holding a slot in the service: with workers, each worker's own (over its private socket)."""
        if not self.service_workers:
            return self.proc.stub().GetCapabilities(pb.GetCapabilitiesRequest(), timeout=5).active_sessions
        held = 0
        for worker in self.service_workers:
            with grpc.insecure_channel(f"unix:{worker.socket}") as ch:
                held += pb_grpc.SpeechStub(ch).GetCapabilities(pb.GetCapabilitiesRequest(), timeout=5).active_sessions
        return held

    def settle(self, timeout_s: float) -> Counts:
        """The counters once every session is over (polled: a cancel reaches the server a moment later)."""
        deadline = time.monotonic() + timeout_s
        while True:
            counts = self.counts()
            if counts.zero() or time.monotonic() > deadline:
                return counts
            time.sleep(0.1)

    def serving(self) -> bool:
        """Readiness SERVING; with workers, every worker's own, each given WORKER_READINESS_LAG_S to learn of
        slots another worker's sessions freed."""
        if not self.service_workers:
            try:
                return self.proc.health() == health_pb2.HealthCheckResponse.SERVING
            except grpc.RpcError:
                return False
        deadline = time.monotonic() + WORKER_READINESS_LAG_S
        while not (serving := all([w.serving() for w in self.service_workers])) and time.monotonic() < deadline:
            time.sleep(0.05)
        return serving

    def accept_worker_restart(self, lost_pid: int, timeout_s: float = 30.0) -> str | None:
        """Worker `lost_pid` was lost on purpose (a worker_loss case): wait for the supervisor's replacement,
        then watch it. None, or what went wrong."""
        deadline = time.monotonic() + timeout_s
        now = service_workers(self.proc.proc.pid)
        while time.monotonic() < deadline:
            now = service_workers(self.proc.proc.pid)
            replaced = len(now) == self._workers and lost_pid not in {w.pid for w in now}
            if replaced and all(w.serving() for w in now):
                self.service_workers = now
                return None
            time.sleep(0.1)
        return f"not {self._workers} serving workers without {lost_pid} {timeout_s:.0f} s after its loss: {now}"

    def alive(self) -> str | None:
        if self.proc.proc.poll() is not None:
            return f"service exited with {self.proc.proc.returncode}"
        if len(sidecars := sidecar_children(self.proc.proc.pid)) != self._engines:
            return f"{len(sidecars)} sidecar processes, not {self._engines}"
        now = service_workers(self.proc.proc.pid) if self.service_workers else []
        if now != self.service_workers:  # the supervisor restarts a dead worker: that death is the failure
            return (
                f"service workers {[(w.index, w.pid) for w in self.service_workers]} are now "
                f"{[(w.index, w.pid) for w in now]}"
            )
        if self.frontend_pids and (pids := self._frontend_pids(5.0)) != self.frontend_pids:
            return f"front ends {self.frontend_pids} are now {pids}"  # the sidecar replaces a dead one
        return None

    def new_log_problems(self) -> list[str]:
        """Over-long lines and unhandled-exception lines written since the last call."""
        with self.proc.log_path.open("rb") as f:
            f.seek(self._log_offset)
            data = f.read()
        cut = data.rfind(b"\n") + 1  # a line still being written is read next time
        self._log_offset += cut
        problems = []
        for line in data[:cut].splitlines():
            if len(line) > MAX_LOG_LINE:
                problems.append(f"log line of {len(line)} bytes: {line[:160]!r}...")
            elif any(a in line for a in LOG_ALARMS) or line.startswith(b"Traceback (most recent call last)"):
                problems.append(f"log: {line[:300].decode(errors='replace')}")
        return problems

    def rss(self) -> dict[str, int]:
        sidecars = sidecar_children(self.proc.proc.pid)
        pids = {
            "service": self.proc.proc.pid,
            **{f"worker-{w.index}": w.pid for w in self.service_workers},
            **(
                {"sidecar": sidecars[0]}
                if self._engines == 1
                else {f"sidecar-{i}": pid for i, pid in enumerate(sidecars)}
            ),
            **{f"frontend-{i}": pid for i, pid in enumerate(self.frontend_pids)},
        }
        return {k: psutil.Process(pid).memory_info().rss for k, pid in pids.items()}

    def rss_growth(self) -> dict[str, int]:
        now = self.rss()
        if not self.rss_base:
            self.rss_base = dict(now)
        for k, v in now.items():
            self.rss_peak[k] = max(self.rss_peak.get(k, 0), v)
        return {k: v - self.rss_base[k] for k, v in now.items()}


def log_excerpt(server: WireServer, pattern: str, limit: int = 3) -> list[str]:
    """Lines of the server's whole log matching `pattern` (for a failure report)."""
    rx = re.compile(pattern)
    return [ln[:300] for ln in server.proc.log().splitlines() if rx.search(ln)][:limit]
