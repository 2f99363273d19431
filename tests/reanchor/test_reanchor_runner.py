"""Re-anchoring refuses a model runner or scheduler it does not match, instead of arming half of itself.

vLLM 0.32 picks model runner V2 wherever Triton is (every GPU install); V2 shares no base class with the V1
runner the hook wraps. These run vLLM's real classes (no GPU needed: only the class objects are used).
"""

from __future__ import annotations

import pytest

from tests.vllm_guard import import_vllm

import_vllm("vllm")  # skips without vLLM, fails in CI (VOXGATE_REQUIRE_VLLM=1)

from engine_sidecar.engines.voxtral.reanchor.worker import install_hook, runner_problem  # noqa: E402


def test_a_v2_model_runner_is_refused_with_the_reason() -> None:
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner as V2Runner

    assert install_hook()
    problem = runner_problem(object.__new__(V2Runner))
    assert problem is not None
    assert "vllm.v1.worker.gpu.model_runner.GPUModelRunner" in problem and "VLLM_USE_V2_MODEL_RUNNER=0" in problem


def test_the_v1_runners_are_accepted_once_hooked() -> None:
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    assert install_hook()
    assert runner_problem(object.__new__(GPUModelRunner)) is None
    assert runner_problem(object.__new__(CPUModelRunner)) is None  # the CPU runner inherits the hooked method


def test_the_scheduler_subclass_must_match_the_resolved_async_flag() -> None:
    from engine_sidecar.engines.voxtral.reanchor.scheduler import (
        ReanchorAsyncScheduler,
        ReanchorScheduler,
        check_scheduling_mode,
    )

    check_scheduling_mode(ReanchorScheduler, async_scheduling=False)
    check_scheduling_mode(ReanchorAsyncScheduler, async_scheduling=True)
    with pytest.raises(ValueError, match="async_scheduling=True"):
        check_scheduling_mode(ReanchorScheduler, async_scheduling=True)
    with pytest.raises(ValueError, match="async_scheduling=False"):
        check_scheduling_mode(ReanchorAsyncScheduler, async_scheduling=False)


def test_gpu_engines_ask_for_the_v1_runner_and_explicit_async_scheduling() -> None:
    from engine_sidecar.engines.voxtral.options import VoxtralOptions
    from engine_sidecar.engines.voxtral.procs import GPU_ENV_DEFAULTS

    assert GPU_ENV_DEFAULTS["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    gpu = VoxtralOptions().engine_kwargs("m", on_cpu=False, reanchor=True)
    cpu = VoxtralOptions().engine_kwargs("m", on_cpu=True, reanchor=True)
    assert gpu["async_scheduling"] is True and gpu["scheduler_cls"].endswith("ReanchorAsyncScheduler")
    assert cpu["async_scheduling"] is False and cpu["scheduler_cls"].endswith(".ReanchorScheduler")
