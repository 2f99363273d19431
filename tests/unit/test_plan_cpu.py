"""`voxgate plan`: the CPU ceiling next to GPU memory's, and front ends / workers to carry the streams."""

from __future__ import annotations

import json

import pytest

from engine_sidecar.engines.voxtral.plan.cli import main
from engine_sidecar.engines.voxtral.plan.cpu import cpu_plan


def test_a_big_box_is_bound_by_gpu_memory_and_gets_enough_front_ends_and_workers() -> None:
    plan = cpu_plan(cores=192, gpus=8, streams_per_gpu=175)
    assert (plan.gpu_streams, plan.binds) == (1400, "gpu memory")
    assert plan.cpu_streams == (192 - 8) * 1000 // 23
    assert plan.front_ends_per_engine * plan.streams_per_front_end >= 175  # 4 × 57
    assert plan.workers * plan.streams_per_worker >= 1400  # 16 × 88
    assert (plan.front_ends_per_engine, plan.workers) == (4, 16)


def test_too_few_cores_bind_before_gpu_memory() -> None:
    plan = cpu_plan(cores=16, gpus=8, streams_per_gpu=175)
    assert plan.binds == "cpu" and plan.cpu_streams == 8000 // 23 < plan.gpu_streams
    assert plan.workers == 4  # for the 347 streams the cores carry, not the 1400 memory admits
    with pytest.raises(ValueError):
        cpu_plan(cores=0, gpus=1, streams_per_gpu=10)


def test_the_plan_reports_the_cpu_ceiling(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--gpu-memory", "141GiB", "--preset", "datacenter", "--gpus", "8", "--cpu-cores", "192"]) == 0
    text = capsys.readouterr().out
    assert "CPU: 192 cores, 8 GPU(s): cores carry 8000 streams" in text
    assert "--engine-option frontends=4 per engine and --workers 16 --gpus all" in text
    assert main(["--gpu-memory", "141GiB", "--preset", "datacenter", "--json", "--cpu-cores", "4"]) == 0
    rows = json.loads(capsys.readouterr().out)["presets"][0]["rows"]
    assert all(row["cpu"]["cores"] == 4 and row["cpu"]["gpus"] == 1 for row in rows)


def test_a_box_measured_costs_replace_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    plan = cpu_plan(cores=16, gpus=1, streams_per_gpu=335, front_end_mc=30, service_mc=10)
    assert plan.cpu_streams == 15000 // 40 and (plan.front_end_mc, plan.service_mc) == (30, 10)
    assert plan.front_ends_per_engine == 13 and plan.streams_per_front_end == 26  # 335 / (800 // 30)
    assert (
        main(
            [
                "--gpu-memory",
                "141GiB",
                "--preset",
                "datacenter",
                "--cpu-cores",
                "16",
                "--front-end-mc",
                "30",
                "--service-mc",
                "10",
            ]
        )
        == 0
    )
    assert "(30 + 10 millicores each" in capsys.readouterr().out
    assert main(["--gpu-memory", "141GiB", "--front-end-mc", "0"]) == 2
