"""Re-anchoring's seams into vLLM: a worker extension vLLM accepts on every worker class, a scheduler matching
vLLM's resolved scheduling, and each release's GPU environment. vLLM's real classes, no GPU needed."""

from __future__ import annotations

import os

import pytest

from tests.vllm_guard import import_vllm

import_vllm("vllm")  # skips without vLLM, fails in CI (VOXGATE_REQUIRE_VLLM=1)


def test_the_worker_extension_adds_only_new_names_to_every_worker_class() -> None:
    """vLLM asserts this itself when it mixes the extension in (worker_base.init_worker): no name may clash."""
    from vllm.v1.worker.cpu_worker import CPUWorker
    from vllm.v1.worker.gpu_worker import Worker

    from engine_sidecar.engines.voxtral.reanchor.worker import ReanchorWorkerExtension

    names = [n for n in vars(ReanchorWorkerExtension) if not n.startswith("__")]
    assert "voxgate_rotate" in names and all(n.startswith("voxgate_") for n in names)
    for worker in (Worker, CPUWorker):
        assert [n for n in names if hasattr(worker, n)] == []


def test_no_model_runner_method_is_patched() -> None:
    """The worker side is reached through collective_rpc only: vLLM's runner classes are left as they are."""
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner as V2Runner
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    import engine_sidecar.engines.voxtral.reanchor.worker  # noqa: F401
    import engine_sidecar.engines.voxtral.vllm_plugin as plugin

    plugin.register()
    for cls in (GPUModelRunner, CPUModelRunner, V2Runner):
        for name, value in vars(cls).items():
            assert not getattr(value, "_voxgate_hook", False), f"{cls.__name__}.{name}"
            if callable(value) and hasattr(value, "__module__"):
                assert value.__module__.startswith("vllm"), f"{cls.__name__}.{name} is {value.__module__}'s"


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


def test_gpu_engines_get_each_releases_runner_switch_and_explicit_async_scheduling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from engine_sidecar.engines.voxtral.options import VoxtralOptions
    from engine_sidecar.engines.voxtral.procs import set_release_env
    from engine_sidecar.engines.voxtral.vllm_window.versions import RELEASES

    for name, wanted in (("0.32", "0"), ("0.33", "0"), ("0.34", None)):
        monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
        set_release_env(cpu=False, release=RELEASES[name])
        assert os.environ.get("VLLM_USE_V2_MODEL_RUNNER") == wanted, name  # 0.34 raises for any value but 1
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    set_release_env(cpu=True, release=RELEASES["0.32"])
    assert "VLLM_USE_V2_MODEL_RUNNER" not in os.environ
    gpu = VoxtralOptions().engine_kwargs("m", on_cpu=False, reanchor=True)
    cpu = VoxtralOptions().engine_kwargs("m", on_cpu=True, reanchor=True)
    assert gpu["async_scheduling"] is True and gpu["scheduler_cls"].endswith("ReanchorAsyncScheduler")
    assert cpu["async_scheduling"] is False and cpu["scheduler_cls"].endswith(".ReanchorScheduler")
    assert gpu["worker_extension_cls"].endswith("reanchor.worker.ReanchorWorkerExtension")
