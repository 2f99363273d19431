"""--engines / --gpus → engine specs, and placement order across engines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine_api.frontends import FRONTEND_INDEX, FRONTENDS
from engine_api.v1 import engine_pb2
from service.config import Config
from service.cpu_slices import cpu_slices, omp_binds, one_per_core, physical_core
from service.engine_pool import EngineLoad, EnginePool, placement_order
from service.gpus import EngineLayoutError, engine_specs, gpu_list, nvidia_smi_gpu_count, visible_devices

ROOT = Path(__file__).resolve().parents[2]


def fake_nvidia_smi(tmp: Path, gpus: int) -> str:
    """A PATH whose nvidia-smi lists `gpus` GPUs the way the real one does."""
    exe = tmp / "nvidia-smi"
    lines = "".join(f"echo 'GPU {i}: NVIDIA H200 (UUID: GPU-{i:08x})'\n" for i in range(gpus))
    exe.write_text(f'#!/bin/sh\n[ "$1" = -L ] || exit 2\n{lines}')
    exe.chmod(0o755)
    return str(tmp)


def test_one_engine_by_default_unpinned_on_the_given_socket() -> None:
    (spec,) = engine_specs(Config(sidecar_socket="/run/voxgate/engine.sock"))
    assert (spec.index, spec.gpu, spec.socket, spec.env) == (0, None, "/run/voxgate/engine.sock", {})


def test_engines_n_each_with_its_own_socket() -> None:
    specs = engine_specs(Config(engines=3, sidecar_socket="/run/e.sock"))
    assert [(s.gpu, s.socket) for s in specs] == [
        (None, "/run/e.sock.0"),
        (None, "/run/e.sock.1"),
        (None, "/run/e.sock.2"),
    ]
    assert [s.socket for s in engine_specs(Config(engines=2))] == ["", ""]  # each a private temp dir


def test_gpus_pin_one_engine_each() -> None:
    specs = engine_specs(Config(gpus="2, 5"), environ={})
    assert [(s.index, s.env) for s in specs] == [(0, {"CUDA_VISIBLE_DEVICES": "2"}), (1, {"CUDA_VISIBLE_DEVICES": "5"})]
    assert len(engine_specs(Config(gpus="0,1", engines=2), environ={})) == 2  # consistent: fine


@pytest.mark.parametrize(("engines", "gpus"), [(3, "0,1"), (0, ""), (2, "0,0"), (1, "0,,1")])
def test_inconsistent_layouts_are_refused(engines: int, gpus: str) -> None:
    with pytest.raises(EngineLayoutError):
        engine_specs(Config(engines=engines, gpus=gpus), environ={})


def test_gpus_all_counts_with_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", fake_nvidia_smi(tmp_path, 3))
    assert nvidia_smi_gpu_count() == 3
    assert gpu_list("all", environ={}) == ("0", "1", "2")
    with pytest.raises(EngineLayoutError, match="--engines 2"):
        engine_specs(Config(gpus="all", engines=2), environ={})


def no_gpu_counting() -> int:
    raise AssertionError("with CUDA_VISIBLE_DEVICES set, nvidia-smi (every GPU of the node) is not asked")


def test_gpus_all_is_the_devices_cuda_visible_devices_allots() -> None:
    allotted = {"CUDA_VISIBLE_DEVICES": "GPU-5f1c,GPU-0a2b"}  # as the Kubernetes device plugin sets it
    specs = engine_specs(Config(gpus="all"), no_gpu_counting, allotted)
    assert [s.env for s in specs] == [{"CUDA_VISIBLE_DEVICES": "GPU-5f1c"}, {"CUDA_VISIBLE_DEVICES": "GPU-0a2b"}]
    assert gpu_list("all", no_gpu_counting, {"CUDA_VISIBLE_DEVICES": " 5, 2 "}) == ("5", "2")  # its order


def test_gpu_ids_index_into_cuda_visible_devices() -> None:
    allotted = {"CUDA_VISIBLE_DEVICES": "2,5,GPU-77"}
    assert gpu_list("1,0", no_gpu_counting, allotted) == ("5", "2")  # index i of the visible list, as in CUDA
    assert gpu_list("2", no_gpu_counting, allotted) == ("GPU-77",)
    assert gpu_list("GPU-77,0", no_gpu_counting, allotted) == ("GPU-77", "2")  # a visible UUID, verbatim
    with pytest.raises(EngineLayoutError, match=r"device 3 is past the 3 .*CUDA_VISIBLE_DEVICES='2,5,GPU-77'"):
        gpu_list("0,3", no_gpu_counting, allotted)
    with pytest.raises(EngineLayoutError, match="GPU-99 is not one of the devices this process may use"):
        gpu_list("GPU-99", no_gpu_counting, allotted)
    with pytest.raises(EngineLayoutError, match="names one device twice"):
        gpu_list("2,GPU-77", no_gpu_counting, allotted)


@pytest.mark.parametrize("value", ["", " ", "-1", "-1,0"])
def test_no_visible_gpu_is_a_clear_error(value: str) -> None:
    for gpus in ("all", "0"):
        with pytest.raises(EngineLayoutError, match="makes no GPU visible to this process"):
            engine_specs(Config(gpus=gpus), no_gpu_counting, {"CUDA_VISIBLE_DEVICES": value})
    # Without --gpus nothing is pinned, whatever is visible.
    assert engine_specs(Config(), no_gpu_counting, {"CUDA_VISIBLE_DEVICES": value})[0].env == {}


def test_cuda_visible_devices_is_read_as_cuda_reads_it() -> None:
    assert visible_devices({}) is None  # unset: every GPU of the box
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "0,2,-1,1"}) == ("0", "2")  # ends at an invalid entry
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "MIG-9a,GPU-1,"}) == ("MIG-9a", "GPU-1")


def test_the_process_environment_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    assert [s.gpu for s in engine_specs(Config(gpus="all"), no_gpu_counting)] == ["4", "6"]


def test_gpus_all_without_nvidia_smi_fails_clearly(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}  # no nvidia-smi anywhere
    env.pop("CUDA_VISIBLE_DEVICES", None)  # set, it would be the list
    done = subprocess.run(
        [sys.executable, "-m", "service", "serve", "--port", "0", "--gpus", "all"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "--gpus all: nvidia-smi is not on PATH" in done.stderr


def test_placement_prefers_room_then_free_capacity_then_fewest_placed() -> None:
    loads = [
        EngineLoad(0, admitting=True, free=3, placed=5),
        EngineLoad(1, admitting=True, free=7, placed=9),
        EngineLoad(2, admitting=False, free=10, placed=0),
        EngineLoad(3, admitting=True, free=7, placed=2),
    ]
    assert placement_order(loads) == [3, 1, 0, 2]
    full = [EngineLoad(0, admitting=True, free=0, placed=4), EngineLoad(1, admitting=True, free=1, placed=8)]
    assert placement_order(full) == [1, 0]


def frontends_status(sockets: list[str], index: int = 0) -> engine_pb2.GetStatusResponse:
    """A front end's GetStatus answer, as a sidecar with len(sockets) front ends gives it."""
    return engine_pb2.GetStatusResponse(
        engine="voxtral", frontend_sockets=sockets, counters={FRONTEND_INDEX: index, FRONTENDS: len(sockets)}
    )


def test_each_front_end_a_status_lists_becomes_an_attached_placement_target_once() -> None:
    pool = EnginePool(Config(engine="voxtral", engines=2, sidecar_socket="/run/e.sock"), lambda _ready: None)
    assert [(str(t.socket), t.frontend, t.attached) for t in pool.engines] == [
        ("/run/e.sock.0", None, False),
        ("/run/e.sock.1", None, False),
    ]
    sockets = ["/run/e.sock.0", "/run/e.sock.0.a", "/run/e.sock.0.b"]  # whatever names the sidecar chose
    pool.engines[0]._take_status(frontends_status(sockets))
    new = pool._follow_front_ends()
    assert [(str(t.socket), t.frontend, t.attached) for t in new] == [
        ("/run/e.sock.0.a", 1, True),
        ("/run/e.sock.0.b", 2, True),
    ]
    assert pool.engines[0].frontend == 0 and [pool._engine_of(n) for n in range(4)] == [0, 1, 0, 0]
    # The next status changes nothing; an attached front end's own status adds no target.
    pool.engines[0]._take_status(frontends_status(sockets))
    new[0]._take_status(frontends_status(sockets, index=1))
    assert pool._follow_front_ends() == [] and len(pool.engines) == 4


def test_an_engine_with_one_front_end_stays_one_target() -> None:
    pool = EnginePool(Config(engine="voxtral", sidecar_socket="/run/e.sock"), lambda _ready: None)
    pool.engines[0]._take_status(engine_pb2.GetStatusResponse(engine="voxtral"))
    assert pool._follow_front_ends() == []
    assert [(str(t.socket), t.frontend, t.attached) for t in pool.engines] == [("/run/e.sock", None, False)]


def test_several_voxtral_engines_on_the_cpu_each_get_their_own_cores() -> None:
    specs = engine_specs(Config(engine="voxtral", engines=2), environ={}, allowed=lambda: {0, 1})
    assert [s.cpus for s in specs] == ["0", "1"]
    assert [s.env for s in specs] == [{"VLLM_CPU_OMP_THREADS_BIND": "0"}, {"VLLM_CPU_OMP_THREADS_BIND": "1"}]
    many = engine_specs(Config(engine="voxtral", engines=3), environ={}, allowed=lambda: set(range(8)))
    assert [s.cpus for s in many] == ["0,1", "2,3", "4,5"]  # 6 and 7 left to EngineCores, front ends, the service


@pytest.mark.parametrize(
    "config, environ",
    [
        (Config(engine="voxtral"), {}),  # one engine: vLLM's own binding
        (Config(engine="voxtral", engines=2), {"VLLM_CPU_OMP_THREADS_BIND": "0-3|4-7"}),  # the operator's choice
        (Config(engine="fake", engines=2), {}),  # not vLLM
        (Config(engine="voxtral", gpus="0,1"), {}),  # on GPUs (vLLM's CUDA build reads no CPU binding)
    ],
)
def test_cores_are_chosen_only_for_several_voxtral_engines_on_the_cpu(config: Config, environ: dict[str, str]) -> None:
    specs = engine_specs(config, environ=environ, allowed=lambda: set(range(8)))
    assert all(s.cpus is None and "VLLM_CPU_OMP_THREADS_BIND" not in s.env for s in specs)


def test_cpu_slices_are_disjoint_runs_and_leave_a_core_when_they_can() -> None:
    assert cpu_slices(2, list(range(16))) == [list(range(0, 8)), list(range(8, 15))]  # 15 left over
    assert cpu_slices(2, list(range(64))) == [list(range(32)), list(range(32, 63))]  # two nodes of 32: one each
    assert cpu_slices(2, [0, 1, 2]) == [[0], [1]]
    assert cpu_slices(3, [0, 1]) == [[0], [1], [0]]  # fewer cores than engines: shared, round the engines
    assert cpu_slices(2, [4, 9]) == [[4], [9]]  # the allowed CPUs, whatever their ids


def test_smt_siblings_are_left_out_as_vllm_does(tmp_path: Path) -> None:
    for cpu, core in enumerate([0, 1, 0, 1]):  # two cores, two threads each: siblings 0/2 and 1/3
        topology = tmp_path / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text("0\n")
        (topology / "core_id").write_text(f"{core}\n")
    assert one_per_core([3, 2, 1, 0], lambda cpu: physical_core(cpu, tmp_path)) == [0, 1]
    assert one_per_core([0, 1, 5], lambda cpu: physical_core(cpu, tmp_path)) == [0, 1, 5]  # cpu5 unknown: kept
    assert omp_binds(2, {}, lambda: {0, 1, 2, 3}, lambda cpu: physical_core(cpu, tmp_path)) == ["0", "1"]
