"""Chaos on the voxtral engine (vLLM CPU, tiny random checkpoint): SIGKILL of the sidecar under 3 live sessions.

Where the fake engine restarts in about a second, a voxtral sidecar has to start vLLM
again (tens of seconds here). The sessions wait for it (`--engine-recovery-timeout-s`),
their clients are held back by flow control meanwhile, and the session goes on after the seam.
Random weights: the test asserts structure and timing, never the text.

Timings are printed (`pytest -s`) and written to `voxtral_sigkill_recovery.json` under
the test's tmp dir; the assertions on them are deliberately generous (a noisy CI box).
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import TINY_VOXTRAL_SERVE_ARGS, ServerProcess, config_request, read_wav_pcm, silence, start_server
from tests.reliability.streams import CHUNK, run_threads, write_measurement
from voxgate_client.v1 import speech_pb2 as pb

if os.environ.get("VOXGATE_REQUIRE_VLLM") == "1":
    import vllm  # noqa: F401  (in CI this test must run, not skip)
else:
    pytest.importorskip("vllm")
psutil = pytest.importorskip("psutil")

SESSIONS = 3
CLIPS = ["librivox_amiable_woman.wav", "cards_eight_of_spades.wav", "go_forward.wav", "flite_rms_turn_left.wav"]
# vLLM starts in 30-60 s here, but took 270 s once on a box busy with other vLLM test runs. The sessions
# wait this long for the restarted engine, so their documented path here is "wait, then carry on";
# after a longer outage they would end ENGINE_LOST (that path: tests/integration/test_lifecycle.py).
RECOVERY_TIMEOUT_S = 600


def speech(rotation: int) -> bytes:
    """~17 s of real speech: the fixture clips with 0.6 s pauses, in an order that differs per session."""
    clips = CLIPS[rotation:] + CLIPS[:rotation]
    return b"".join(read_wav_pcm(name)[0] + silence(0.6) for name in clips)


def timed_live(audio: bytes, sent_at: list[float]) -> Iterator[pb.StreamingRecognizeRequest]:
    """Real-time pacing; records when gRPC took each message (a gap there is flow control holding the client)."""
    start = time.monotonic()
    for n, i in enumerate(range(0, len(audio), CHUNK)):
        delay = start + n * CHUNK / 32000 - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        sent_at.append(time.monotonic())
        yield pb.StreamingRecognizeRequest(audio=audio[i : i + CHUNK])


def vllm_processes(root: int) -> list[Any]:
    return [p for p in psutil.Process(root).children(recursive=True) if p.name().startswith("VLLM::")]


def orphans(procs: list[Any]) -> list[tuple[int, str]]:
    """Those of `procs` still alive whose parent is gone (reparented to init or a subreaper)."""
    left = []
    for p in procs:
        try:
            parent = p.parent()
            if p.is_running() and (
                parent is None or parent.pid == 1 or not parent.name().startswith(("python", "VLLM::"))
            ):
                left.append((p.pid, p.name()))
        except psutil.NoSuchProcess:
            pass
    return left


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    from engine_sidecar.engines.voxtral.tiny_checkpoint import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny-voxtral"), seed=0)


def start_voxtral(tmp: Path, model: Path) -> ServerProcess:
    return start_server(
        tmp,
        *TINY_VOXTRAL_SERVE_ARGS,
        "--sidecar-health-interval-s",
        "0.5",
        "--engine-recovery-timeout-s",
        str(RECOVERY_TIMEOUT_S),
        engine="voxtral",
        model=str(model),
        ready_timeout_s=600,
    )


# Start (ready_timeout_s 600) + the streams' own deadline (RECOVERY_TIMEOUT_S + 300: the kill, the restart and
# the rest of the sessions happen inside it) + shutdown; pytest's 300 s default would cut the recovery short.
@pytest.mark.timeout(600 + RECOVERY_TIMEOUT_S + 300 + 300)
def test_voxtral_sidecar_sigkill_during_3_live_sessions(tiny_model: Path, tmp_path: Path) -> None:
    audios = [speech(n) for n in range(SESSIONS)]
    server = start_voxtral(tmp_path, tiny_model)
    sent_at: list[list[float]] = [[] for _ in range(SESSIONS)]
    new_tree: list[Any] = []
    try:
        old_pid = server.sidecar_pid()
        assert "sidecar" in " ".join(psutil.Process(old_pid).cmdline())
        old_tree = vllm_processes(old_pid)
        assert {"VLLM::EngineCore", "VLLM::Worker"} <= {p.name() for p in old_tree}, old_tree

        recs, threads = run_threads(
            server,
            [itertools.chain([config_request()], timed_live(audio, sent_at[n])) for n, audio in enumerate(audios)],
            timeout=RECOVERY_TIMEOUT_S + 300,
        )
        # Kill mid-stream: every session has results, and has been talking for a few seconds.
        assert all(r.wait_for(lambda x: x.HasField("result"), 60) for r in recs), "results before the kill"
        time.sleep(max(0.0, recs[0].started_at + 5.0 - time.monotonic()))
        assert all(t.is_alive() for t in threads), "still streaming at the kill"
        killed_at = time.monotonic()
        os.kill(old_pid, signal.SIGKILL)

        not_serving_at = server.wait_health(serving=False, timeout_s=90)
        _, alive = psutil.wait_procs(old_tree, timeout=90)
        vllm_gone_at = time.monotonic()
        assert not alive, f"vLLM processes of the killed sidecar are left: {[(p.pid, p.name()) for p in alive]}"
        serving_at = server.wait_health(serving=True, timeout_s=RECOVERY_TIMEOUT_S)
        new_pid = server.sidecar_pid()
        assert new_pid != old_pid
        new_tree = vllm_processes(new_pid)
        assert {"VLLM::EngineCore", "VLLM::Worker"} <= {p.name() for p in new_tree}
        assert not orphans(new_tree)

        for t in threads:
            t.join(RECOVERY_TIMEOUT_S)
        assert not any(t.is_alive() for t in threads), "every stream ended"

        to_warning, to_result, held = [], [], []
        for n, rec in enumerate(recs):
            kinds = [r.WhichOneof("response") for r in rec.items]
            where = f"session {n}: {kinds} {rec.warnings()} {rec.ended()}"
            assert rec.error is None, f"session {n}: {rec.error}"
            ended = rec.ended()
            assert ended is not None and ended.reason == pb.SESSION_END_REASON_CLIENT_END, where
            seams = [
                i
                for i, (_, r) in enumerate(rec.responses)
                if r.HasField("warning") and r.warning.code == "ENGINE_RESTARTED"
            ]
            assert len(seams) == 1, f"one seam: {where}"
            assert [w.code for _, w in rec.warnings()] == ["ENGINE_RESTARTED"], where
            seam_at = rec.responses[seams[0]][0]
            after = [(t, r) for t, r in rec.responses[seams[0] + 1 :] if r.HasField("result")]
            assert after, f"results go on after the restart: {where}"
            assert any(r.result.is_final for _, r in after), f"finals after the restart: {where}"
            assert after[0][0] >= serving_at - 2.0, "the first result after the seam comes from the new engine"
            to_warning.append(seam_at - killed_at)
            to_result.append(after[0][0] - killed_at)
            gaps = [b - a for a, b in zip(sent_at[n], sent_at[n][1:], strict=False)]
            held.append(max(gaps))
            results = [r for _, r in rec.finals()]
            ends = [r.end_offset.ToMilliseconds() for r in results]
            assert ends == sorted(ends), f"offsets continue across the seam: {ends}"
            assert len({r.result_id for r in results}) == len(results), "no final twice"
            assert ended.audio_duration.ToMilliseconds() == pytest.approx(len(audios[n]) // 32, abs=100)
            assert len(sent_at[n]) == -(-len(audios[n]) // CHUNK), "the client sent all its audio"

        measured = {
            "sessions": SESSIONS,
            "audio_s_per_session": round(len(audios[0]) / 32000, 2),
            "kill_to_seam_warning_s": [round(x, 3) for x in to_warning],
            "kill_to_not_serving_s": round(not_serving_at - killed_at, 3),
            "kill_to_old_vllm_processes_gone_s": round(vllm_gone_at - killed_at, 3),
            "kill_to_serving_s": round(serving_at - killed_at, 3),
            "kill_to_first_result_after_restart_s": [round(x, 3) for x in to_result],
            "client_writes_held_max_s": [round(x, 3) for x in held],
        }
        print(f"\nvoxtral sidecar SIGKILL recovery: {measured}")
        write_measurement(tmp_path / "voxtral_sigkill_recovery.json", measured)
        assert max(to_warning) < 10
        assert max(to_result) < RECOVERY_TIMEOUT_S
    finally:
        code = server.stop()
    assert code == 0
    _, alive = psutil.wait_procs(new_tree, timeout=60)
    assert not alive, f"vLLM processes left after shutdown: {[(p.pid, p.name()) for p in alive]}"
