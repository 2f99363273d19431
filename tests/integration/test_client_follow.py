"""voxgate's other clients (Node, Go, C++) carry a call through what ends a connection but not the call: a dropped
connection, a rolling restart of the workers (SIGUSR2: each drains), a worker's SIGKILL.

Each example program runs against `voxgate serve --workers 2` on sphinx, and what it prints must be what an
undisturbed run of the same audio prints, to the 10 ms: every final once, none lost. `--no-resume` is the
control: the same SIGKILL ends that run with an error. The audio and its reasoning are those of
test_worker_loss.py (three utterances sphinx hears the same wherever a session starts).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import time
import wave
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers import ServerProcess, service_workers, start_server
from tests.integration.client_examples import BUILD_TIMEOUT_S, go_example, node_example, tail
from tests.integration.test_cpp_client import cpp_bin
from tests.integration.test_worker_loss import PACE, speech
from tests.relay import Relay

pytestmark = pytest.mark.timeout(BUILD_TIMEOUT_S)
__all__ = ["cpp_bin", "go_example", "node_example"]  # fixtures
FIRST_FINAL_S = 2.5  # at twice real time, a final or two in


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path_factory.mktemp("follow"), "--workers", "2", "--drain-grace-s", "30", engine="sphinx")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def call_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("audio") / "call.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(speech())
    return path


@pytest.fixture(params=["node", "go", "cpp"])
def example(request: pytest.FixtureRequest) -> list[str]:
    if request.param == "cpp":
        return [str(request.getfixturevalue("cpp_bin") / "transcribe")]
    cmd: list[str] = request.getfixturevalue(f"{request.param}_example")
    return cmd


def serving(server: ServerProcess) -> None:
    """Both workers serve again (a test before may have killed or replaced them)."""
    deadline = time.monotonic() + 60
    while len(workers := service_workers(server.proc.pid)) < 2:
        assert time.monotonic() < deadline, "the workers did not come back"
        time.sleep(0.2)
    for worker in workers:
        worker.wait_serving()


def run(cmd: list[str], wav: Path, target: str, during: Callable[[], None] | None = None, *extra: str) -> tuple:
    proc = subprocess.Popen(
        [*cmd, str(wav), "--server", target, "--speed", str(PACE), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if during is not None:
        time.sleep(FIRST_FINAL_S)
        during()
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


@pytest.fixture(scope="module")
def undisturbed(server: ServerProcess, call_wav: Path, node_example: list[str]) -> str:
    serving(server)
    code, out, err = run(node_example, call_wav, server.target)
    assert code == 0, err
    assert len(out.splitlines()) == 3, out
    return out


def kill_the_calls_worker(server: ServerProcess, log_from: int) -> None:
    """SIGKILL the worker that admitted the call (its `session_started` log line names it); the other serves on."""
    started = [
        json.loads(line)
        for line in server.log()[log_from:].splitlines()
        if line.startswith("{") and '"session_started"' in line
    ]
    assert len(started) == 1, started
    by_index = {w.index: w for w in service_workers(server.proc.pid)}
    os.kill(by_index[started[0]["worker"]].pid, signal.SIGKILL)


# Longer than five reconnects backed off from 0.2 s (6.2 s, the old fixed budget); well inside the server's
# 30 s resume window, which is how long the clients now keep trying.
OUTAGE_S = 6.5


def test_a_dropped_connection_is_resumed_after_an_outage(
    example: list[str], server: ServerProcess, call_wav: Path, undisturbed: str
) -> None:
    serving(server)
    relay = Relay(server.target)
    try:
        code, out, err = run(example, call_wav, relay.target, functools.partial(relay.down_for, OUTAGE_S))
    finally:
        relay.close()
    assert code == 0, err
    assert out == undisturbed, (out, err)
    assert relay.accepted >= 2, "the cut did not reach the call"


def test_a_worker_sigkill_loses_no_final(
    example: list[str], server: ServerProcess, call_wav: Path, undisturbed: str
) -> None:
    serving(server)
    log_from = len(server.log())
    kill = functools.partial(kill_the_calls_worker, server, log_from)
    code, out, err = run(example, call_wav, server.target, kill)
    assert code == 0, err
    assert out == undisturbed, (out, err)


def test_a_rolling_restart_loses_no_final(
    example: list[str], server: ServerProcess, call_wav: Path, undisturbed: str
) -> None:
    serving(server)
    code, out, err = run(example, call_wav, server.target, lambda: server.proc.send_signal(signal.SIGUSR2))
    assert code == 0, err
    assert out == undisturbed, (out, err)
    assert "draining" in err, "the drain did not reach the call"


def test_without_resume_the_worker_sigkill_ends_the_call(
    example: list[str], server: ServerProcess, call_wav: Path
) -> None:
    serving(server)
    log_from = len(server.log())
    kill = functools.partial(kill_the_calls_worker, server, log_from)
    code, out, err = run(example, call_wav, server.target, kill, "--no-resume")
    assert code == 1, tail(subprocess.CompletedProcess([], code, out, err))
    assert "UNAVAILABLE" in err, err
    assert len(out.splitlines()) < 3, out


@pytest.mark.parametrize("resume", [True, False])
def test_the_audio_is_paced_with_and_without_resume(
    example: list[str], server: ServerProcess, call_wav: Path, resume: bool
) -> None:
    """At --speed PACE the call takes at least its audio's duration / PACE: the control run above (--no-resume)
    only means something if it sends as the real call does (the C++ sender once skipped pacing without resume,
    sent a 12 s call in 0.05 s, and the SIGKILL came after the call had ended). A lower bound only: a loaded
    machine makes it slower, never faster."""
    serving(server)
    with wave.open(str(call_wav)) as w:
        audio_s = w.getnframes() / w.getframerate()
    started = time.monotonic()
    code, out, err = run(example, call_wav, server.target, None, *([] if resume else ["--no-resume"]))
    elapsed_s = time.monotonic() - started
    assert code == 0, err
    assert elapsed_s >= 0.9 * audio_s / PACE, f"{elapsed_s:.2f} s for {audio_s:.2f} s of audio at {PACE}x"
