"""Three `voxgate serve` instances behind a real gRPC load balancer (nginx: grpc_pass, least_conn, HTTP/2),
started by the test on loopback: new streams spread over the instances; SIGTERM on one drains it (its
sessions get their final results and SessionEnded{DRAINING}); each of its clients, with the Python
client's resume policy (`resume=ResumePolicy(...)`, reconnect_on_drain), opens a new session through the
balancer by itself, lands on another instance and carries on with the audio the drained session had not
processed: no audio lost or transcribed twice.

Resume tokens are per instance: a drained session's client cannot resume on another one, so it starts a
new session there (deploy/README.md, "Scale-out").

nginx comes from scripts/ci_toolchains.sh (Debian nginx-light). Without it the test skips, or fails when
VOXGATE_REQUIRE_CLIENT_TOOLCHAINS=1 (CI).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from tests.helpers import ServerProcess, silence, start_server, voiced
from voxgate_client import ResumePolicy, SpeechClient, chunks
from voxgate_client.config import StreamConfig
from voxgate_client.v1 import speech_pb2 as pb

INSTANCES = 3
LEGS = 6
RATE = 16000
BYTES_PER_S = RATE * 2
CHUNK = BYTES_PER_S // 10  # 100 ms
# Speech and pauses: a final result every 2 s (the pause ends each utterance).
AUDIO = (voiced(1.0) + silence(1.0)) * 4
SPANS = [(k * 2000, k * 2000 + 1000) for k in range(4)]  # the voiced stretches, in ms
AUDIO_MS = len(AUDIO) * 1000 // BYTES_PER_S
DRAIN_GRACE_S = 5
# A new session after a drain may first be refused by the draining instance (UNAVAILABLE/DRAINING),
# until the balancer has moved on: retry for a while.
POLICY = ResumePolicy(max_attempts=30, backoff_s=0.1, max_backoff_s=0.5)


def find_nginx() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


NGINX_CONF = """
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log info;
events {{ worker_connections 1024; }}
http {{
    log_format upstream '$upstream_addr $status $request_time';
    access_log {tmp}/access.log upstream;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    upstream voxgate {{
        least_conn;
{servers}
    }}
    server {{
        listen 127.0.0.1:{port} http2;
        # A session is one long request: no body size limit, long timeouts (voxgate ends idle ones).
        client_max_body_size 0;
        client_body_timeout 1h;
        grpc_read_timeout 1h;
        grpc_send_timeout 1h;
        location / {{
            grpc_pass grpc://voxgate;
        }}
    }}
}}
"""


@dataclass
class Balancer:
    proc: subprocess.Popen[bytes]
    target: str
    dir: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_nginx(nginx: str, tmp: Path, upstreams: list[str]) -> Balancer:
    tmp.mkdir()
    for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (tmp / sub).mkdir(mode=0o777)
    tmp.chmod(0o755)  # workers may run as another user (nobody) when the test runs as root
    port = free_port()
    servers = "\n".join(f"        server {u} max_fails=1 fail_timeout=30s;" for u in upstreams)
    conf = tmp / "nginx.conf"
    conf.write_text(NGINX_CONF.format(tmp=tmp, port=port, servers=servers))
    proc = subprocess.Popen(
        [nginx, "-p", str(tmp), "-c", str(conf), "-e", str(tmp / "error.log")],
        stdout=subprocess.DEVNULL,
        stderr=(tmp / "stderr.log").open("wb"),
    )
    balancer = Balancer(proc, f"127.0.0.1:{port}", tmp)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        assert proc.poll() is None, (tmp / "stderr.log").read_text() + (tmp / "error.log").read_text()
        try:
            with SpeechClient(balancer.target) as client:
                client.get_capabilities(timeout=2)
            return balancer
        except grpc.RpcError:
            time.sleep(0.1)
    balancer.stop()
    raise AssertionError("nginx did not proxy: " + (tmp / "error.log").read_text())


@dataclass
class Session:
    session_id: str
    end_reason: int = 0
    finals: list[pb.RecognitionResult] = field(default_factory=list)
    audio_ms: int = 0  # what the server processed (SessionEnded.audio_duration)


@dataclass
class Leg:
    """One caller: streams AUDIO through the balancer with the client's resume policy; after a drain the
    client continues in a new session by itself (resume tokens do not cross instances)."""

    target: str
    started: threading.Event = field(default_factory=threading.Event)
    sessions: list[Session] = field(default_factory=list)
    responses: list[pb.StreamingRecognizeResponse] = field(default_factory=list)
    error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by the test
            self.error = exc
            self.started.set()

    def _run(self) -> None:
        config = StreamConfig("LINEAR16", RATE)
        with SpeechClient(self.target) as client:
            for r in client.stream(config, chunks(AUDIO, CHUNK), pace=1.0, timeout=60, resume=POLICY):
                self.responses.append(r)
                kind = r.WhichOneof("response")
                if kind == "started":
                    self.sessions.append(Session(r.started.session_id))
                    self.started.set()
                elif kind == "result" and r.result.is_final:
                    self.sessions[-1].finals.append(r.result)
                elif kind == "ended":
                    self.sessions[-1].end_reason = r.ended.reason
                    self.sessions[-1].audio_ms = r.ended.audio_duration.ToMilliseconds()

    def check_one_transcript(self) -> None:
        """The sessions together: all the audio processed once, every voiced stretch final once."""
        assert abs(sum(s.audio_ms for s in self.sessions) - AUDIO_MS) <= 2, [s.audio_ms for s in self.sessions]
        finals = [f for s in self.sessions for f in s.finals if f.text.strip()]
        ranges = [(f.start_offset.ToMilliseconds(), f.end_offset.ToMilliseconds()) for f in finals]
        assert all(a[1] <= b[0] for a, b in zip(ranges, ranges[1:], strict=False)), ranges
        for start, end in SPANS:
            assert any(a < end and b > start for a, b in ranges), (start, end, ranges)
        seqs = [r.seq for r in self.responses]
        assert seqs == sorted(set(seqs)), "one stream: seq goes on across the seam"


def instance_of(servers: list[ServerProcess], session_id: str) -> int:
    (index,) = [i for i, s in enumerate(servers) if session_id in s.log()]
    return index


def active_sessions(server: ServerProcess) -> int:
    return int(server.stub().GetCapabilities(pb.GetCapabilitiesRequest(), timeout=5).active_sessions)


@pytest.fixture
def nginx() -> str:
    path = find_nginx()
    if path is None:
        if os.environ.get("VOXGATE_REQUIRE_CLIENT_TOOLCHAINS") == "1":
            pytest.fail("nginx is required in CI (scripts/ci_toolchains.sh installs nginx-light)")
        pytest.skip("nginx is not installed (apt-get install nginx-light, or scripts/ci_toolchains.sh)")
    return path


def test_streams_spread_and_a_drained_instance_hands_its_clients_to_the_others(nginx: str, tmp_path: Path) -> None:
    servers: list[ServerProcess] = []
    balancer = None
    threads: list[threading.Thread] = []
    try:
        for _ in range(INSTANCES):
            servers.append(
                start_server(tmp_path, "--drain-grace-s", str(DRAIN_GRACE_S), "--retry-delay-s", "0.2", engine="fake")
            )
        balancer = start_nginx(nginx, tmp_path / "nginx", [s.target for s in servers])

        # New streams spread: least_conn sends each new stream to the instance with the fewest.
        legs = [Leg(balancer.target) for _ in range(LEGS)]
        for leg in legs:
            threads.append(threading.Thread(target=leg.run))
            threads[-1].start()
            assert leg.started.wait(20) and leg.error is None, leg.error
        assert [active_sessions(s) for s in servers] == [LEGS // INSTANCES] * INSTANCES
        first = [instance_of(servers, leg.sessions[0].session_id) for leg in legs if leg.sessions]
        assert sorted(first) == sorted(list(range(INSTANCES)) * (LEGS // INSTANCES))

        # Drain instance 0 once its sessions have had a final result.
        time.sleep(2.5)
        drained = servers[0]
        drained.proc.send_signal(signal.SIGTERM)
        assert drained.proc.wait(DRAIN_GRACE_S + 10) == 0
        for thread in threads:
            thread.join(60)
            assert not thread.is_alive()
        for leg in legs:
            assert leg.error is None, leg.error

        moved = [leg for leg, where in zip(legs, first, strict=True) if where == 0]
        stayed = [leg for leg, where in zip(legs, first, strict=True) if where != 0]
        assert len(moved) == LEGS // INSTANCES
        for leg in moved:
            before, *after = leg.sessions
            assert before.end_reason == pb.SESSION_END_REASON_DRAINING
            assert before.finals, "the drained session got its final results first"
            assert after, "the client reconnected through the balancer"
            assert after[-1].end_reason == pb.SESSION_END_REASON_CLIENT_END
            assert all(instance_of(servers, s.session_id) != 0 for s in after), "...to another instance"
            assert any(s.finals for s in after), "...and carried on"
            leg.check_one_transcript()
        for leg in stayed:
            (only,) = leg.sessions
            assert only.end_reason == pb.SESSION_END_REASON_CLIENT_END and len(only.finals) >= 3
            leg.check_one_transcript()
        assert [active_sessions(s) for s in servers[1:]] == [0] * (INSTANCES - 1)
    finally:
        for thread in threads:
            thread.join(30)
        if balancer is not None:
            balancer.stop()
        for server in servers:
            server.stop()
