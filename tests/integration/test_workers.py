"""`voxgate serve --workers 2`: two real worker processes on one port, one sphinx sidecar behind them.

Each worker also serves a private Unix socket (the resume relay's); the tests find the workers among the
parent's children and use those sockets to reach a chosen worker, which SO_REUSEPORT does not let a client do.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from service.bench.driver import OWN_CONNECTION
from service.security import hash_token
from service.sidecar import NOT_ADMITTING_STATUS_INTERVAL_S
from tests.helpers import (
    ROOT,
    ServerProcess,
    ServiceWorker,
    config_request,
    error_reason,
    fake_script,
    final_text,
    hold_stream,
    read_wav_pcm,
    recognize,
    resume_stream,
    service_workers,
    silence,
    start_server,
)
from voxgate_client.v1 import speech_pb2 as pb

CHUNK = 3200  # 100 ms
MAX_SESSIONS = 3


def workers(server: ServerProcess) -> list[ServiceWorker]:
    return service_workers(server.proc.pid)


def fresh_connection(target: str) -> grpc.Channel:
    """A channel with a connection of its own: by default channels to one target share one connection (gRPC's
    global subchannel pool), so every session would reach whichever worker that one connection landed on."""
    return grpc.insecure_channel(target, options=OWN_CONNECTION)


def owner(token: str) -> int:
    assert token[0] == "w" and "." in token, token
    return int(token[1 : token.index(".")])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(
        tmp_path_factory.mktemp("workers"),
        "--workers",
        "2",
        "--max-sessions",
        str(MAX_SESSIONS),
        "--drain-grace-s",
        "5",
        engine="sphinx",
    )
    for worker in workers(proc):
        worker.wait_serving()
    yield proc
    proc.stop()


def test_two_workers_share_the_port_and_its_sessions(server: ServerProcess) -> None:
    found = workers(server)
    assert [w.index for w in found] == [0, 1] and len({w.pid for w in found}) == 2
    seen: set[int] = set()
    with ThreadPoolExecutor(MAX_SESSIONS) as pool:
        for _ in range(8):  # batches of sessions, each on a fresh connection: the kernel picks the worker
            held = list(pool.map(lambda _: hold_stream(fresh_connection(server.target)), range(MAX_SESSIONS)))
            owners = [owner(h.started.started.resume_token) for h in held]
            for worker in found:  # every worker answers for the whole server, wherever the sessions are
                capabilities = worker.stub().GetCapabilities(pb.GetCapabilitiesRequest(), timeout=5)
                assert capabilities.active_sessions == MAX_SESSIONS
                assert capabilities.capacity.service_sessions == MAX_SESSIONS
            for h in held:
                assert h.release()[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END
            seen.update(owners)
            if seen == {0, 1}:
                break
    assert seen == {0, 1}, "both workers served sessions on the one port"


def test_capacity_is_one_truth_across_workers(server: ServerProcess) -> None:
    """Each worker compares the whole service's sessions with the sidecar's slots (which count every
    worker's): with sessions on both workers, no false leak, and every worker reports the same counts."""
    log_start = server.log_path.stat().st_size
    for _ in range(10):  # until the kernel has put sessions on both workers
        held = [hold_stream(fresh_connection(server.target)) for _ in range(MAX_SESSIONS)]
        if len({owner(h.started.started.resume_token) for h in held}) == 2:
            break
        for h in held:
            h.release()
    else:
        pytest.fail("the kernel never spread the sessions over both workers")
    try:
        time.sleep(3 * 2.0)  # three sidecar health intervals: an audit at each, on each worker
        for worker in workers(server):
            capacity = worker.stub().GetCapabilities(pb.GetCapabilitiesRequest(), timeout=5).capacity
            counts = (capacity.service_sessions, capacity.sidecar_slots, capacity.engine_sessions)
            assert counts == (MAX_SESSIONS,) * 3 and capacity.mismatches == 0, (worker.index, counts)
            # ... with each worker's share, whichever worker answers, and the one engine's counts
            shares = {w.worker: w.sessions for w in capacity.workers}
            on = [owner(h.started.started.resume_token) for h in held]
            assert shares == {0: on.count(0), 1: on.count(1)}, (worker.index, shares)
            (engine,) = capacity.engines
            assert (engine.engine, engine.ready, engine.sidecar_slots, engine.engine_sessions) == (
                0,
                True,
                MAX_SESSIONS,
                MAX_SESSIONS,
            )
        status = subprocess.run(
            [sys.executable, "-m", "service", "status", "--server", server.target],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        assert f"workers    worker 0: {on.count(0)}, worker 1: {on.count(1)}" in status, status
    finally:
        for h in held:
            h.release()
    time.sleep(3 * 2.0)
    for worker in workers(server):
        capacity = worker.stub().GetCapabilities(pb.GetCapabilitiesRequest(), timeout=5).capacity
        assert (capacity.service_sessions, capacity.sidecar_slots, capacity.mismatches) == (0, 0, 0)
    with server.log_path.open() as log:
        log.seek(log_start)
        assert "capacity_mismatch" not in log.read()


def test_a_real_leak_is_still_caught_with_workers(server: ServerProcess) -> None:
    """The audit compares the sum over workers with the sidecar's slots: a slot held outside every worker (an
    engine session opened on the sidecar's own socket, which no worker counts) is reported by each worker
    within two health intervals (2 s each), and the counts agree again once it is gone."""
    import socket

    from engine_api.frames import HEADER, frame, frames_socket
    from engine_api.v1 import engine_pb2

    log_start = server.log_path.stat().st_size
    engine_socket = Path(workers(server)[0].peer_dir) / "engine.sock"
    leak = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    leak.connect(str(frames_socket(engine_socket)))
    leak.sendall(frame(engine_pb2.SessionInput(open=engine_pb2.Open(session_id="leak", sample_rate_hz=16000))))
    (size,) = HEADER.unpack(leak.recv(HEADER.size, socket.MSG_WAITALL))
    opened = engine_pb2.SessionOutput.FromString(leak.recv(size, socket.MSG_WAITALL))
    assert opened.HasField("opened"), opened
    try:
        started = time.monotonic()
        caught: dict[int, float] = {}
        while len(caught) < 2 and time.monotonic() - started < 10:
            for worker in workers(server):
                capacity = worker.stub().GetCapabilities(pb.GetCapabilitiesRequest(), timeout=5).capacity
                if capacity.mismatches and worker.index not in caught:
                    caught[worker.index] = time.monotonic() - started
                    assert (capacity.service_sessions, capacity.sidecar_slots) == (0, 1), capacity
            time.sleep(0.2)
        print(f"\ninjected leak reported by each worker after: {caught}")
        assert sorted(caught) == [0, 1] and max(caught.values()) <= 2 * 2.0 + 1.0, caught
    finally:
        leak.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "capacity_agrees_again" not in server.log()[log_start:]:
        time.sleep(0.2)
    text = server.log()[log_start:]
    assert text.count('"event": "capacity_mismatch"') == 2, "one per worker, once"
    assert "capacity_agrees_again" in text


def test_admission_is_exact_across_workers(server: ServerProcess) -> None:
    held = [hold_stream(grpc.insecure_channel(server.target)) for _ in range(MAX_SESSIONS)]
    try:
        for worker in workers(server):  # each worker alone has room; together they have none
            with pytest.raises(grpc.RpcError) as info:
                recognize(worker.stub(), [config_request()], timeout=30)
            assert error_reason(info.value)[:2] == (grpc.StatusCode.UNAVAILABLE, "CAPACITY")
        with pytest.raises(grpc.RpcError) as info:
            recognize(server.stub(), [config_request()], timeout=30)
        assert error_reason(info.value)[:2] == (grpc.StatusCode.UNAVAILABLE, "CAPACITY")
    finally:
        for stream in held:
            stream.release()
    assert recognize(server.stub(), [config_request()])[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END


def test_a_worker_is_ready_again_soon_after_another_workers_sessions_free_the_engine(tmp_path: Path) -> None:
    """Slots freed by worker 0's sessions reach worker 1's readiness within a fraction of a second, not at its
    next health check (--sidecar-health-interval-s, 3 s here): a worker whose engine said "full" asks again
    every NOT_ADMITTING_STATUS_INTERVAL_S. (The wire fuzz found a worker NOT_SERVING while it admitted.)"""
    proc = start_server(
        tmp_path,
        "--workers",
        "2",
        "--max-sessions",
        "2",
        "--sidecar-health-interval-s",
        "3",
        engine="fake",
        model=fake_script(tmp_path),
    )
    try:
        w0, w1 = workers(proc)
        for worker in (w0, w1):
            worker.wait_serving()
        held = [hold_stream(grpc.insecure_channel(f"unix:{w0.socket}")) for _ in range(2)]
        try:
            w1.wait_serving(False, timeout_s=10)  # its next check sees the engine full
        finally:
            for stream in held:
                assert stream.release()[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END
        freed = time.monotonic()  # every session has ended: the sidecar's slots are free
        lag = w1.wait_serving(True, timeout_s=10) - freed
        assert lag < NOT_ADMITTING_STATUS_INTERVAL_S + 1.0, f"worker 1 ready {lag:.2f} s after the slots were freed"
    finally:
        assert proc.stop() == 0


def speech() -> bytes:
    first, rate = read_wav_pcm("go_forward.wav")
    second, rate2 = read_wav_pcm("cards_eight_of_spades.wav")
    assert rate == rate2 == 16000
    return first + silence(1.0) + second + silence(1.0)


def flow_config() -> pb.StreamingRecognizeRequest:
    return config_request(flow_status=pb.FlowStatusConfig(enabled=True, interval_ms=100))


def test_a_resume_landing_on_the_other_worker_loses_nothing(server: ServerProcess) -> None:
    audio = speech()
    pieces = [pb.StreamingRecognizeRequest(audio=audio[i : i + CHUNK]) for i in range(0, len(audio), CHUNK)]
    reference = recognize(server.stub(), [flow_config(), *pieces])

    first: list[pb.StreamingRecognizeResponse] = []
    stop_sending = threading.Event()
    half = len(audio) // 2

    def requests() -> Iterator[pb.StreamingRecognizeRequest]:
        yield flow_config()
        for i in range(0, half, CHUNK):
            yield pb.StreamingRecognizeRequest(audio=audio[i : min(i + CHUNK, half)])
        stop_sending.wait(30)

    call = server.stub().StreamingRecognize(requests(), timeout=60)
    for response in call:  # the client vanishes once the server has all of the first half
        first.append(response)
        if response.HasField("flow_status") and response.flow_status.acked_audio_bytes >= half:
            break
    call.cancel()
    stop_sending.set()
    started = first[0].started
    acked = max(r.flow_status.acked_audio_bytes for r in first if r.HasField("flow_status"))
    other = workers(server)[1 - owner(started.resume_token)]

    resume = pb.StreamingRecognizeRequest(
        config=pb.StreamingConfig(
            resume_token=started.resume_token, resume_last_seq=first[-1].seq, resume_audio_bytes=acked
        )
    )
    rest = [pb.StreamingRecognizeRequest(audio=audio[i : i + CHUNK]) for i in range(acked, len(audio), CHUNK)]
    second = resume_stream(other.stub(), [resume, *rest])  # relayed by the worker that does not hold it

    assert second[0].started.resumed and second[0].started.session_id == started.session_id
    assert second[1].seq > first[-1].seq
    assert final_text(first + second[1:]) == final_text(reference) != ""
    assert second[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END
    assert '"event": "resume_relayed"' in server.log()

    with pytest.raises(grpc.RpcError) as info:  # the owner's answer comes back through the relay unchanged
        recognize(
            other.stub(), [pb.StreamingRecognizeRequest(config=pb.StreamingConfig(resume_token=started.resume_token))]
        )
    assert error_reason(info.value)[:2] == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")


def test_a_dead_worker_is_restarted_on_the_same_port(server: ServerProcess) -> None:
    before = workers(server)
    os.kill(before[1].pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        now = workers(server)
        if len(now) == 2 and now[1].pid != before[1].pid:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("worker 1 was not restarted")
    now[1].wait_serving()
    hello = now[1].stub().GetCapabilities(pb.GetCapabilitiesRequest(), timeout=20, wait_for_ready=True)
    assert hello.max_sessions == MAX_SESSIONS


def sessions_started_by_worker(log: str) -> dict[int, int]:
    counts = {0: 0, 1: 0}
    for line in log.splitlines():
        if '"event": "session_started"' in line and (m := re.search(r'"worker": (\d+)', line)):
            counts[int(m.group(1))] += 1
    return counts


def test_voxgate_bench_spreads_its_sessions_over_the_workers(server: ServerProcess, tmp_path: Path) -> None:
    # One TCP connection per session: SO_REUSEPORT spreads connections, so one run's sessions reach both
    # workers (most runs do; sessions sharing one connection would all land on one worker, in every run).
    for run in range(6):
        before = sessions_started_by_worker(server.log())
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "service",
                "bench",
                "--server",
                server.target,
                "-n",
                str(MAX_SESSIONS),
                "--sessions-per-connection",
                "1",
                "--retries",
                "0",
                "--duration",
                "2",
                "--no-plots",
                "--quiet",
                "--out",
                str(tmp_path / f"bench-{run}.json"),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        after = sessions_started_by_worker(server.log())
        if all(after[w] > before[w] for w in (0, 1)):
            return
    raise AssertionError(f"each run's bench sessions all landed on one worker: last {before} -> {after}")


def test_a_level_spread_over_two_load_generators_is_one_outcome(server: ServerProcess) -> None:
    # bench/scaling.py --load-processes: each child drives its share; the parent merges their sessions.
    import asyncio

    from service.bench.audio import load_loop
    from service.bench.driver import Plan, pick_language
    from service.bench.spread import drive, shares
    from service.bench.trace import Thresholds

    assert shares(MAX_SESSIONS, 2) == [2, 1] and shares(1, 4) == [1]

    async def level() -> object:
        plan = Plan(
            duration_s=2.0,
            frame_ms=20,
            speed=1.0,
            stagger_s=0.1,
            timeout_s=30.0,
            thresholds=Thresholds(5.0, 10.0, 5.0),
            ref_shift_ms=0,
            progress=False,
            sessions_per_connection=1,
            language=await pick_language(server.target, None),
        )
        return await drive(server.target, MAX_SESSIONS, plan, load_loop(), 2)

    outcome = asyncio.run(level())
    assert outcome.load_processes == 2 and outcome.n == MAX_SESSIONS, outcome
    assert outcome.errors == {} and outcome.latency_p50_s is not None, outcome


def wait_restarted(server: ServerProcess, index: int, old_pid: int) -> ServiceWorker:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        now = workers(server)
        if len(now) == 2 and now[index].pid != old_pid:
            now[index].wait_serving()
            return now[index]
        time.sleep(0.1)
    raise AssertionError(f"worker {index} was not restarted")


def test_a_tenants_quota_holds_across_workers_and_a_dead_worker_gives_its_slots_back(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(
        json.dumps(
            {
                "tenants": {
                    "acme": {"tokens": [hash_token("acme-1")], "max_sessions": 2},
                    "globex": {"tokens": [hash_token("globex-1")]},
                }
            }
        )
    )
    acme, globex = (("authorization", "Bearer acme-1"),), (("authorization", "Bearer globex-1"),)
    server = start_server(
        tmp_path,
        "--workers",
        "2",
        "--auth-tokens-file",
        str(tokens),
        "--max-sessions",
        "8",
        engine="fake",
        model=fake_script(tmp_path, words=[["hello", 300]]),
    )
    held = []
    try:
        w0, w1 = workers(server)
        for w in (w0, w1):
            w.wait_serving()
        held = [hold_stream(grpc.insecure_channel(f"unix:{w.socket}"), acme) for w in (w0, w1)]
        for w in (w0, w1):  # each worker holds one of acme's two: neither may admit a third
            with pytest.raises(grpc.RpcError) as info:
                recognize(w.stub(), [config_request()], metadata=acme, timeout=30)
            assert error_reason(info.value)[:2] == (grpc.StatusCode.RESOURCE_EXHAUSTED, "SESSION_QUOTA")
        other = hold_stream(grpc.insecure_channel(f"unix:{w0.socket}"), globex)  # another tenant: room
        assert other.release()[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END
        assert held.pop(0).release()[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END
        assert (
            recognize(w1.stub(), [config_request()], metadata=acme)[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END
        ), "the slot worker 0 gave back is worker 1's to use"

        os.kill(w1.pid, signal.SIGKILL)  # its session of acme's is gone with it, and so is its slot
        held.pop().stop_sending()
        w1 = wait_restarted(server, 1, w1.pid)
        assert '"event": "quota_slots_released"' in server.log()
        held = [hold_stream(grpc.insecure_channel(f"unix:{w.socket}"), acme) for w in (w0, w1)]
        with pytest.raises(grpc.RpcError) as info:
            recognize(w0.stub(), [config_request()], metadata=acme, timeout=30)
        assert error_reason(info.value)[:2] == (grpc.StatusCode.RESOURCE_EXHAUSTED, "SESSION_QUOTA")
    finally:
        for stream in held:
            stream.stop_sending()
        server.stop()


# Last: it stops the module's server.
def test_sigterm_drains_every_worker_and_the_parent_exits_0(server: ServerProcess) -> None:
    found = workers(server)
    held = [hold_stream(grpc.insecure_channel(f"unix:{w.socket}")) for w in found]  # one live session on each
    server.proc.send_signal(signal.SIGTERM)
    for stream in held:
        rest = list(stream.call)
        assert rest[-1].ended.reason == pb.SESSION_END_REASON_DRAINING
        stream.stop_sending()
    assert server.proc.wait(30) == 0
    assert not any(Path(f"/proc/{w.pid}").exists() for w in found)
