"""The sidecar process with the voxtral engine: no orphaned vLLM processes, engine death exits non-zero."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")
psutil = pytest.importorskip("psutil")

EXIT_ENGINE_DEAD = 70


class Sidecar:
    def __init__(self, model: Path, tmp: Path) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "service",
                "sidecar",
                "--engine",
                "voxtral",
                "--model",
                str(model),
                "--socket",
                str(tmp / "engine.sock"),
                "--max-sessions",
                "2",
            ],
            stdout=subprocess.PIPE,
            stderr=(tmp / "sidecar.log").open("wb"),
            text=True,
        )
        self.log = tmp / "sidecar.log"
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # blocks until READY (vLLM starts in ~25 s) or exit
        assert line.startswith("READY"), (line, self.log.read_text()[-3000:])
        self.descendants: list[Any] = psutil.Process(self.proc.pid).children(recursive=True)

    def names(self) -> set[str]:
        return {p.name() for p in self.descendants}

    def wait_descendants_gone(self, timeout: float = 20) -> list[Any]:
        _, alive = psutil.wait_procs(self.descendants, timeout=timeout)
        return alive

    def kill_all(self) -> None:
        for p in [*self.descendants, psutil.Process(self.proc.pid)] if self.proc.poll() is None else self.descendants:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass


@pytest.fixture
def sidecar(tiny_model: Path, tmp_path: Path) -> Iterator[Sidecar]:
    s = Sidecar(tiny_model, tmp_path)
    yield s
    s.kill_all()


def test_sigkilled_sidecar_leaves_no_vllm_process(sidecar: Sidecar) -> None:
    assert {"VLLM::EngineCore", "VLLM::Worker"} <= sidecar.names()
    os.kill(sidecar.proc.pid, signal.SIGKILL)
    sidecar.proc.wait(10)
    alive = sidecar.wait_descendants_gone()
    assert not alive, [(p.pid, p.name()) for p in alive]


def test_engine_death_exits_the_sidecar_non_zero(sidecar: Sidecar) -> None:
    core = next(p for p in sidecar.descendants if p.name() == "VLLM::EngineCore")
    t0 = time.monotonic()
    core.kill()
    assert sidecar.proc.wait(30) == EXIT_ENGINE_DEAD
    assert time.monotonic() - t0 < 30
    assert "vllm_engine_dead" in sidecar.log.read_text()
    alive = sidecar.wait_descendants_gone()
    assert not alive, [(p.pid, p.name()) for p in alive]


def test_engine_death_mid_session_ends_it_and_exits_the_sidecar_non_zero(sidecar: Sidecar, tmp_path: Path) -> None:
    """The session's own task meets the dead engine (the step driver's path, not only the idle watch)."""
    import threading

    from service.bench.audio import speech_with_pauses
    from tests.engine.test_voxtral_frontends import session

    socket = str(tmp_path / "engine.sock")
    outcome: list[Any] = []
    t = threading.Thread(target=lambda: outcome.append(session(socket, "s", speech_with_pauses(30.0), pace_s=0.08)))
    t.start()
    time.sleep(4)  # steps are flowing
    core = next(p for p in sidecar.descendants if p.name() == "VLLM::EngineCore")
    core.kill()
    assert sidecar.proc.wait(30) == EXIT_ENGINE_DEAD
    t.join(30)
    ((result, error),) = outcome
    assert error is not None  # the connection ended without a clean end (LOST), or with the engine's error
    assert result.closed is None
    assert "vllm_engine_dead" in sidecar.log.read_text()


def test_sidecar_refuses_a_vllm_outside_its_window(tmp_path: Path, tiny_model: Path) -> None:
    code = "import sys, vllm; vllm.__version__ = '0.35.0'; from service.cli import main; sys.exit(main())"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "sidecar",
            "--engine",
            "voxtral",
            "--model",
            str(tiny_model),
            "--socket",
            str(tmp_path / "s.sock"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    said = proc.stderr + proc.stdout
    assert "vLLM 0.35.0 is outside the voxtral engine's window (0.32, 0.33, 0.34; >=0.32,<0.35)" in said
    assert "allow_unlisted_vllm=true" in said
