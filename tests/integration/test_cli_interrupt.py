"""`voxgate transcribe`'s own ends: Ctrl-C ends the session on the server at once (its slot free, the finals of
what was sent printed, "interrupted", exit 130), and the command never hangs at exit, even against a server
that is still starting."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import wave
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import ServerProcess, read_wav_pcm, silence, start_server
from voxgate_client.v1 import speech_pb2 as pb

CLI = [sys.executable, "-m", "service", "transcribe"]


@pytest.fixture(scope="module")
def one_slot_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_server(tmp_path_factory.mktemp("one-slot"), "--max-sessions", "1", engine="sphinx")
    yield server
    server.stop()


def long_call(tmp: Path) -> Path:
    """An utterance, a pause, then 18 s more speech: long enough to be interrupted in the middle."""
    first, _ = read_wav_pcm("go_forward.wav")
    rest, _ = read_wav_pcm("librivox_amiable_woman.wav")
    path = tmp / "call.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(first + silence(1.5) + rest * 3)
    return path


def paced_run(server: ServerProcess, tmp: Path) -> tuple[subprocess.Popen[str], str]:
    """`voxgate transcribe` on the long call, paced, once it printed its first final (~4 s in)."""
    command = [*CLI, "--server", server.target, str(long_call(tmp))]
    cli = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert cli.stdout is not None
    return cli, cli.stdout.readline()


def test_ctrl_c_ends_the_session_on_the_server_and_prints_the_finals(
    one_slot_server: ServerProcess, tmp_path: Path
) -> None:
    cli, first_final = paced_run(one_slot_server, tmp_path)
    assert first_final.startswith("[0.")
    stub = one_slot_server.stub()
    assert stub.GetCapabilities(pb.GetCapabilitiesRequest()).active_sessions == 1
    cli.send_signal(signal.SIGINT)
    out, err = cli.communicate(timeout=30)
    assert cli.returncode == 130, err
    assert err.rstrip().endswith("interrupted")
    assert "Traceback" not in err
    assert all(line.startswith("[") for line in out.splitlines())  # the final of the utterance cut short, if any
    # The session ended with the stream, not held for a resume: the one slot is free now.
    assert stub.GetCapabilities(pb.GetCapabilitiesRequest()).active_sessions == 0
    again = subprocess.run(
        [*CLI, "--server", one_slot_server.target, "--no-pace", str(tmp_path / "call.wav")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0, again.stderr


def test_a_second_ctrl_c_aborts_at_once(one_slot_server: ServerProcess, tmp_path: Path) -> None:
    cli, _ = paced_run(one_slot_server, tmp_path)
    cli.send_signal(signal.SIGINT)
    cli.send_signal(signal.SIGINT)
    started = time.monotonic()
    _, err = cli.communicate(timeout=30)
    assert cli.returncode == 130 and err.rstrip().endswith("interrupted"), err
    assert "stopping: the server finishes what was sent (Ctrl-C to abort)" in err
    assert time.monotonic() - started < 5


def test_the_command_never_hangs_at_exit_against_a_starting_server(tmp_path: Path) -> None:
    """Runs racing a server's start: refused (ENGINE_UNAVAILABLE), or served; each must exit, 20 of them."""
    path = long_call(tmp_path)
    server = start_server(tmp_path, engine="sphinx", ready_timeout_s=None)
    try:
        runs = [
            subprocess.Popen(
                [*CLI, "--server", server.target, "--no-pace", str(path)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(20)
        ]
        for run in runs:
            _, err = run.communicate(timeout=90)
            assert run.returncode in (0, 1), err
            assert run.returncode == 0 or "ENGINE_UNAVAILABLE" in err or "CAPACITY" in err, err
    finally:
        server.stop()
