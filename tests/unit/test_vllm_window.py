"""The vLLM window: which releases the voxtral engine starts on, and what it does differently on each."""

from __future__ import annotations

import asyncio

import pytest

from engine_sidecar.engines.voxtral import driver_check
from engine_sidecar.engines.voxtral.vllm_window.symbols import SYMBOLS, Symbol, for_release
from engine_sidecar.engines.voxtral.vllm_window.versions import (
    RELEASES,
    VersionMismatch,
    check_window,
    release_name,
)


def test_each_release_of_the_window_starts_and_another_is_refused_by_name() -> None:
    assert list(RELEASES) == ["0.32", "0.33", "0.34"]
    for version, name in (("0.32.0+cpu", "0.32"), ("0.33.0", "0.33"), ("0.34.1+cu130", "0.34")):
        release = check_window(version, allow_unlisted=False)
        assert release is not None and release.name == name == release_name(version)
    for version in ("0.31.2", "0.35.0", "1.0.0"):
        with pytest.raises(VersionMismatch) as refused:
            check_window(version, allow_unlisted=False)
        said = str(refused.value)
        assert f"vLLM {version} is outside" in said and "install 'vllm>=0.32,<0.35'" in said
        assert "allow_unlisted_vllm=true" in said
        assert check_window(version, allow_unlisted=True) is None  # the brave: started, re-anchoring off


def test_the_gpu_extra_installs_the_window() -> None:
    import tomllib
    from pathlib import Path

    from engine_sidecar.engines.voxtral.vllm_window.versions import WINDOW

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert WINDOW == ">=0.32,<0.35"
    assert f"vllm{WINDOW}" in project["project"]["optional-dependencies"]["gpu"]


def test_only_0_34_runs_model_runner_v2_on_a_gpu_by_default() -> None:
    assert RELEASES["0.32"].gpu_env == RELEASES["0.33"].gpu_env == {"VLLM_USE_V2_MODEL_RUNNER": "0"}
    assert RELEASES["0.34"].gpu_env == {}  # 0.34 raises for any value of the switch but 1


def test_the_direct_step_driver_runs_only_on_the_release_it_copies() -> None:
    async def driver(release_key: str | None) -> str:
        release = RELEASES[release_key] if release_key else None
        # No vLLM needed: a release whose request path it does not copy never reaches the comparison.
        return await driver_check.choose(None, None, None, None, "direct", release)

    assert asyncio.run(driver("0.33")) == asyncio.run(driver("0.34")) == asyncio.run(driver(None)) == "vllm"
    assert RELEASES["0.32"].direct_steps


def test_symbol_rows_parse_and_name_their_releases() -> None:
    row = Symbol.parse("vllm.v1.engine.core:EngineCore.collective_rpc(method, timeout, args)", "engine core")
    assert (row.module, row.name, row.attr, row.params) == (
        "vllm.v1.engine.core",
        "EngineCore",
        "collective_rpc",
        ("method", "timeout", "args"),
    )
    assert str(row) == "vllm.v1.engine.core.EngineCore.collective_rpc(method, timeout, args)"
    with pytest.raises(ValueError, match="not a symbol row"):
        Symbol.parse("vllm.v1.engine.core.EngineCore", "x")
    # Only model runner V1's machinery is missing from 0.34: the runner, its input batch, its logits processors.
    v1_parts = ("vllm.v1.worker.gpu_model_runner", "vllm.v1.worker.cpu_model_runner", "vllm.v1.worker.gpu_input_batch")
    v1_only = [s for s in SYMBOLS if s.releases == ("0.32", "0.33")]
    assert v1_only and all(s.module in v1_parts or s.module.startswith("vllm.v1.sample.") for s in v1_only)
    assert len(for_release("0.34")) == len(SYMBOLS) - len(v1_only)


def test_no_reanchor_depends_on_nothing_of_re_anchoring(monkeypatch: pytest.MonkeyPatch) -> None:
    """--no-reanchor: no symbol check, no extension loaded into vLLM, on any release, listed or not."""
    from engine_sidecar.engines.voxtral import engine
    from engine_sidecar.engines.voxtral.options import VoxtralOptions
    from engine_sidecar.engines.voxtral.probes import Probes

    def fail(*_: object) -> list[str]:
        raise AssertionError("re-anchoring's checks ran")

    monkeypatch.setattr(engine, "config_problems", fail)
    off = VoxtralOptions(reanchor=False)
    for release in (RELEASES["0.32"], RELEASES["0.34"], None):
        assert engine.extension_choice(off, release, Probes()) == (["turned off (--no-reanchor)"], False)
