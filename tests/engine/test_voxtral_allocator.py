"""vLLM's EngineCore and Worker run on tcmalloc on the CPU (engine option allocator=auto), the front end keeps
its own malloc, and allocator=system keeps glibc everywhere (engine_sidecar/engines/voxtral/allocator.py; why:
docs/reanchoring.md, the test_reanchor_memory.py bullet).
CI installs libtcmalloc-minimal4 (scripts/ci_toolchains.sh)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psutil
import pytest

from engine_sidecar.engines.voxtral.allocator import find_tcmalloc
from tests.engine.conftest import Harness

pytest.importorskip("vllm")


def mapped_tcmalloc() -> dict[str, bool]:
    """Each process of this engine: whether a libtcmalloc is mapped into it."""
    me = psutil.Process(os.getpid())
    procs = [("front end", me)] + [(c.name(), c) for c in me.children(recursive=True) if c.name().startswith("VLLM::")]
    return {name: "libtcmalloc" in Path(f"/proc/{p.pid}/maps").read_text() for name, p in procs}


@pytest.mark.parametrize("allocator", ["auto", "system"])
def test_vllms_processes_get_tcmalloc_and_the_front_end_keeps_its_malloc(tiny_model: Any, allocator: str) -> None:
    if find_tcmalloc() is None:
        pytest.skip("no libtcmalloc on this machine (apt-get install libtcmalloc-minimal4)")
    before = os.environ.get("LD_PRELOAD")
    h = Harness(tiny_model, {"dtype": "float32", "max_model_len": 320, "allocator": allocator})
    try:
        mapped = mapped_tcmalloc()
        assert os.environ.get("LD_PRELOAD", "").count("libtcmalloc") == (before or "").count("libtcmalloc")
    finally:
        h.close()
    assert {"VLLM::EngineCore", "VLLM::Worker"} <= set(mapped), mapped
    wanted = allocator == "auto"
    assert mapped == {name: wanted and name != "front end" for name in mapped}, mapped
