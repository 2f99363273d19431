"""Which malloc vLLM's processes get (engine_sidecar/engines/voxtral/allocator.py): the choice, and LD_PRELOAD
set only around the spawn. That the EngineCore and Worker really run on it: tests/engine/test_voxtral_allocator.py."""

from __future__ import annotations

import os

import pytest

from engine_sidecar.engines.voxtral.allocator import AllocatorMissing, child_library, describe, for_children
from engine_sidecar.engines.voxtral.options import VoxtralOptions

LIB = "libtcmalloc_minimal.so.4"


def test_auto_takes_tcmalloc_on_the_cpu_and_glibc_on_a_gpu() -> None:
    assert child_library("auto", cpu=True, find=lambda: LIB) == LIB
    assert child_library("auto", cpu=False, find=lambda: LIB) is None
    assert child_library("auto", cpu=True, find=lambda: None) is None
    assert "apt-get install libtcmalloc-minimal4" in describe(None, "auto", True)
    assert describe(LIB, "auto", True) == f"tcmalloc ({LIB})"


def test_tcmalloc_asked_for_is_taken_anywhere_and_its_absence_is_an_error() -> None:
    assert child_library("tcmalloc", cpu=False, find=lambda: LIB) == LIB
    with pytest.raises(AllocatorMissing, match="libtcmalloc-minimal4"):
        child_library("tcmalloc", cpu=True, find=lambda: None)
    assert child_library("system", cpu=True, find=lambda: LIB) is None


def test_an_unknown_allocator_is_refused_by_the_options() -> None:
    with pytest.raises(ValueError, match="allocator must be one of auto, tcmalloc, system"):
        VoxtralOptions.from_mapping({"allocator": "jemalloc"})
    assert VoxtralOptions.from_mapping({"allocator": "system"}).allocator == "system"


def test_ld_preload_is_set_only_inside_and_what_vllm_adds_inside_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LD_PRELOAD", "/opt/a.so")
    with for_children(LIB):
        assert os.environ["LD_PRELOAD"] == f"{LIB}:/opt/a.so"
        os.environ["LD_PRELOAD"] += ":/torch/libgomp.so"  # as vLLM's CPU platform does while configuring
    assert os.environ["LD_PRELOAD"] == "/opt/a.so:/torch/libgomp.so"

    monkeypatch.delenv("LD_PRELOAD")
    with for_children(LIB):
        assert os.environ["LD_PRELOAD"] == LIB
    assert "LD_PRELOAD" not in os.environ


def test_nothing_changes_without_a_library_or_with_one_already_preloaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/libtcmalloc.so.4")
    with for_children(LIB):
        assert os.environ["LD_PRELOAD"] == "/usr/lib/libtcmalloc.so.4"
    assert os.environ["LD_PRELOAD"] == "/usr/lib/libtcmalloc.so.4"
    monkeypatch.delenv("LD_PRELOAD")
    with for_children(None):
        assert "LD_PRELOAD" not in os.environ


def test_the_block_restores_ld_preload_when_the_spawn_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    with pytest.raises(RuntimeError), for_children(LIB):
        raise RuntimeError("the engine did not start")
    assert "LD_PRELOAD" not in os.environ
