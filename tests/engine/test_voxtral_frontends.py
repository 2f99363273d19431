"""Two front ends on one vLLM engine core (engine option `frontends=2`): vLLM's multi-client mechanism.

One sidecar process launches the EngineCore and two front-end processes, each an AsyncLLM client of that
core serving the engine API on its own socket (`<socket>`, `<socket>.1`). Driven here through each
socket (status on gRPC, sessions on its frames socket), as the service does. Geometry as in
test_reanchor.py (max_model_len 320, margin 32: the first re-anchor fires ~21 s into a session), so each
session re-anchors; the token ids
must equal those of the one-front-end engine (the default path) for the same audio.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket as socket_module
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from engine_api.audio import BYTES_PER_MS
from engine_api.frames import HEADER, OK, frame, frames_socket
from engine_api.frontends import FRONTEND_INDEX, FRONTENDS
from engine_api.outputs import Closed, DiagnosticKind
from engine_api.wire import output_from_proto
from engine_sidecar.engines.voxtral.allocator import find_tcmalloc
from engine_sidecar.engines.voxtral.frontend_client import frontend_socket
from engine_sidecar.engines.voxtral.probes import Probes
from service.bench.audio import speech_with_pauses as speech
from tests.engine.conftest import Harness, Result, stream

pytest.importorskip("vllm")
psutil = pytest.importorskip("psutil")

from engine_api.v1 import engine_pb2 as epb  # noqa: E402
from engine_api.v1 import engine_pb2_grpc  # noqa: E402

OPTIONS: dict[str, Any] = dict(
    dtype="float32",
    max_model_len=320,
    block_size=32,
    reanchor_margin_tokens=32,
    max_num_seqs=4,
)
PROBES = Probes(emit_empty_deltas=True, exact_rope_tables=True)  # the sidecar's processes read them from the env
EXIT_ENGINE_DEAD = 70
AUDIO_S = 25.0  # one re-anchor per session (clock 288 at ~21 s)
CHUNK_MS = 80


class FrontEnds:
    """`python -m engine_sidecar --engine voxtral` with frontends=2, READY on stdout."""

    def __init__(self, model: Path, tmp: Path) -> None:
        self.socket = str(tmp / "engine.sock")
        self.log = tmp / "sidecar.log"
        options = {**OPTIONS, "frontends": 2}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "engine_sidecar",
                "--engine",
                "voxtral",
                "--model",
                str(model),
                "--socket",
                self.socket,
                "--max-sessions",
                "4",
                *(arg for k, v in options.items() for arg in ("--engine-option", f"{k}={json.dumps(v)}")),
            ],
            stdout=subprocess.PIPE,
            stderr=self.log.open("wb"),
            text=True,
            env={**os.environ, **PROBES.env()},
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # blocks until READY (every front end serves) or exit
        assert line.startswith("READY"), (line, self.log.read_text()[-3000:])
        self.descendants: list[Any] = psutil.Process(self.proc.pid).children(recursive=True)

    def socket_of(self, index: int) -> str:
        return frontend_socket(self.socket, index)

    def stub(self, index: int) -> Any:
        channel = grpc.insecure_channel(f"unix:{self.socket_of(index)}")
        return engine_pb2_grpc.EngineStub(channel)

    def status(self, index: int) -> Any:
        return self.stub(index).GetStatus(epb.GetStatusRequest(), timeout=10)

    def frontend_pids(self) -> dict[int, int]:
        return {self.status(i).counters[FRONTEND_INDEX]: self.status(i).pid for i in (0, 1)}

    def alive_descendants(self) -> list[Any]:
        """Every process it ever had (front ends, replacements, EngineCore, Worker) still running."""
        if self.proc.poll() is None:
            self.descendants += psutil.Process(self.proc.pid).children(recursive=True)
        return [p for p in set(self.descendants) if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]

    def stop(self) -> None:
        alive = self.alive_descendants()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        _, left = psutil.wait_procs(alive, timeout=30)
        for p in left:
            p.kill()


@pytest.fixture(scope="module")
def frontends(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FrontEnds]:
    f = FrontEnds(tiny_model, tmp_path_factory.mktemp("frontends"))
    yield f
    f.stop()


@pytest.fixture(scope="module")
def audio() -> bytes:
    return speech(AUDIO_S)


@pytest.fixture(scope="module")
def one_frontend(make_harness: Any, audio: bytes) -> Result:
    """The default path (one AsyncLLM that launches its own core), same options, same audio."""
    h: Harness = make_harness(**{k: v for k, v in OPTIONS.items() if k != "dtype"}, **dataclasses.asdict(PROBES))
    return h.run(stream(h.run(h.engine.open_session("ref", "en")), audio), timeout=600)


LOST = "LOST"  # how a session whose connection ended without an `Ended` message failed: its front end died


def session(
    socket: str,
    session_id: str,
    pcm: bytes,
    pace_s: float = 0.0,
    started: threading.Event | None = None,
) -> tuple[Result, str | None]:
    """One engine session on a front end's frames socket, as the service runs it: open, audio in 80 ms chunks,
    close; every output, and how it failed (the `Ended` code, or LOST), if it did."""
    conn = socket_module.socket(socket_module.AF_UNIX, socket_module.SOCK_STREAM)
    conn.settimeout(600)
    conn.connect(str(frames_socket(Path(socket))))

    def write() -> None:
        try:
            conn.sendall(
                frame(epb.SessionInput(open=epb.Open(session_id=session_id, language_code="en", sample_rate_hz=16000)))
            )
            step = CHUNK_MS * BYTES_PER_MS
            for i in range(0, len(pcm), step):
                conn.sendall(frame(epb.SessionInput(audio=epb.AudioChunk(pcm16=pcm[i : i + step], speech=True))))
                if pace_s:
                    time.sleep(pace_s)
            conn.sendall(frame(epb.SessionInput(close=epb.Close())))
        except OSError:
            pass  # the front end is gone: the reader tells

    writer = threading.Thread(target=write)
    writer.start()
    result, failure = Result(), LOST
    with conn:
        while (body := _read_frame(conn)) is not None:
            msg = epb.SessionOutput.FromString(body)
            if msg.WhichOneof("output") == "ended":
                failure = msg.ended.code
                break
            if started is not None and msg.WhichOneof("output") == "delta":
                started.set()
            if (out := output_from_proto(msg)) is not None:
                result.outputs.append(out)
        conn.shutdown(socket_module.SHUT_RDWR)
    writer.join(60)
    return result, None if failure == OK else failure


def _read_frame(conn: socket_module.socket) -> bytes | None:
    """The next frame's body; None when the connection ended (closed or broken)."""
    try:
        head = _read_exactly(conn, HEADER.size)
        return None if head is None else _read_exactly(conn, HEADER.unpack(head)[0])
    except OSError:
        return None


def _read_exactly(conn: socket_module.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        if not (chunk := conn.recv(n - len(data))):
            return None
        data += chunk
    return data


def reanchor_at(r: Result) -> list[int]:
    return [d.at_ms for d in r.diagnostics if d.kind == DiagnosticKind.REANCHOR]


def both(
    frontends: FrontEnds, audio: bytes, pace: tuple[float, float] = (0.0, 0.0), during: Any = None
) -> list[tuple[Result, str | None]]:
    """A session on each front end at once; `during(started_events)` runs meanwhile."""
    out: list[Any] = [None, None]
    started = [threading.Event(), threading.Event()]

    def run(i: int) -> None:
        out[i] = session(frontends.socket_of(i), f"s{i}", audio, pace[i], started[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    if during is not None:
        during(started)
    for t in threads:
        t.join(600)
    return out


def test_each_front_end_says_which_it_is_and_takes_its_share(frontends: FrontEnds) -> None:
    s0, s1 = frontends.status(0), frontends.status(1)
    assert (s0.counters[FRONTEND_INDEX], s0.counters[FRONTENDS]) == (0, 2)
    assert (s1.counters[FRONTEND_INDEX], s1.counters[FRONTENDS]) == (1, 2)
    assert s0.pid != s1.pid != frontends.proc.pid
    # One engine core's capacity (max_num_seqs 4), split: the two never admit more than it holds together.
    assert s0.max_sessions + s1.max_sessions == 4
    assert s0.position_mode == s1.position_mode == "reanchor"


def test_the_core_hosts_engine_core_and_worker_get_tcmalloc_and_the_front_ends_do_not(frontends: FrontEnds) -> None:
    """allocator=auto on the core host's path (engine_sidecar/engines/voxtral/allocator.py): preloaded around the core's
    launch only, so the front ends it starts afterwards (and their replacements) keep glibc's malloc."""
    if find_tcmalloc() is None:
        pytest.skip("no libtcmalloc on this machine (apt-get install libtcmalloc-minimal4)")
    procs = [("host", psutil.Process(frontends.proc.pid))] + [
        (p.name(), p)
        for p in frontends.alive_descendants()
        if "multiprocessing.resource_tracker" not in " ".join(p.cmdline())
    ]  # a helper the core's spawn starts
    mapped = {(name, p.pid): "libtcmalloc" in Path(f"/proc/{p.pid}/maps").read_text() for name, p in procs}
    names = [name for name, _ in mapped]
    assert names.count("VLLM::EngineCore") == 1 and "VLLM::Worker" in names, names
    frontend_pids = set(frontends.frontend_pids().values())
    assert frontend_pids <= {pid for _, pid in mapped}, (frontend_pids, mapped)
    for (name, pid), has in mapped.items():
        assert has == name.startswith(("VLLM::EngineCore", "VLLM::Worker")), (name, pid, mapped)


def test_two_front_ends_carry_sessions_that_reanchor_and_match_one_front_end(
    frontends: FrontEnds, audio: bytes, one_frontend: Result
) -> None:
    before = [frontends.status(i).counters.get("reanchors", 0) for i in (0, 1)]
    results = both(frontends, audio)
    assert reanchor_at(one_frontend), "the reference must re-anchor, or this test proves nothing"
    for i, (result, error) in enumerate(results):
        assert error is None, (i, error)
        assert isinstance(result.closed, Closed)
        assert result.token_ids == one_frontend.token_ids, f"front end {i} differs from the one-front-end path"
        assert reanchor_at(result) == reanchor_at(one_frontend)
        assert frontends.status(i).counters["reanchors"] > before[i]  # each front end got its own news


def test_a_sigkilled_front_end_is_replaced_while_the_other_carries_on(
    frontends: FrontEnds, audio: bytes, one_frontend: Result
) -> None:
    pids = frontends.frontend_pids()

    def kill_front_end_1(started: list[threading.Event]) -> None:
        assert started[1].wait(120) and started[0].wait(120)
        os.kill(pids[1], signal.SIGKILL)

    # Front end 1's session is paced (still open when killed); front end 0's runs at full speed meanwhile.
    (r0, e0), (r1, e1) = both(frontends, audio, pace=(0.0, 0.04), during=kill_front_end_1)
    assert e0 is None and r0.token_ids == one_frontend.token_ids  # the other front end saw nothing
    assert reanchor_at(r0) == reanchor_at(one_frontend)
    assert e1 == LOST  # its session: an engine loss
    assert r1.closed is None

    deadline = time.monotonic() + 180
    while True:  # the replacement serves on the same socket, on a spare client slot of the same core
        try:
            status = frontends.status(1)
            if status.pid != pids[1]:
                break
        except grpc.RpcError:
            pass
        assert time.monotonic() < deadline, frontends.log.read_text()[-3000:]
        time.sleep(1)
    assert status.counters[FRONTEND_INDEX] == 1 and status.counters["frontend_client_slot"] >= 2
    assert frontends.status(0).pid == pids[0]
    assert frontends.proc.poll() is None
    log = frontends.log.read_text()
    assert '"frontend_died"' in log
    orphans = [json.loads(line) for line in log.splitlines() if '"frontend_orphans_aborted"' in line]
    assert orphans and orphans[-1]["requests"] >= 1  # the killed one's parked request no longer holds KV
    # The replacement carries sessions, re-anchoring included, as before.
    result, error = session(frontends.socket_of(1), "after", audio)
    assert error is None and result.token_ids == one_frontend.token_ids
    assert reanchor_at(result) == reanchor_at(one_frontend)


def test_engine_core_death_stops_every_front_end_and_exits_non_zero(frontends: FrontEnds) -> None:
    """Last here (it ends the module's sidecar): the core's death is the whole sidecar's, as with one front end."""
    frontends.alive_descendants()
    core = next(p for p in frontends.descendants if p.name() == "VLLM::EngineCore")
    core.kill()
    assert frontends.proc.wait(60) == EXIT_ENGINE_DEAD
    assert '"vllm_engine_dead"' in frontends.log.read_text()
    _, alive = psutil.wait_procs(frontends.alive_descendants(), timeout=30)
    assert not alive, [(p.pid, p.name()) for p in alive]
