"""Disjoint CPU cores for several vLLM-CPU engines on one box (`--engines N` without `--gpus`).

vLLM's CPU worker binds its OpenMP threads itself (VLLM_CPU_OMP_THREADS_BIND, default "auto"), and "auto" picks
the same cores in every engine: the allowed CPUs of the first NUMA node, one logical CPU per physical core, less
one reserved. Two engines on one box then share those cores, each worker spinning on them while it waits for its
EngineCore, and a second engine can hardly even start while the first is busy (seen on two cores: its Worker got
3 % of a core for minutes). So with several engines each gets its own slice, named in VLLM_CPU_OMP_THREADS_BIND:
like "auto", one logical CPU per physical core and at least one core left for the rest (EngineCores, front ends,
the service) where there are more cores than engines; with no more cores than engines, one core each, shared
round the engines. An operator's own VLLM_CPU_OMP_THREADS_BIND is kept. vLLM's CUDA build does not read it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

OMP_BIND = "VLLM_CPU_OMP_THREADS_BIND"


def allowed_cpus() -> set[int]:
    """The CPUs this process may run on (its affinity: taskset, a cgroup's cpuset)."""
    return os.sched_getaffinity(0)


def physical_core(cpu: int, sysfs: Path = Path("/sys/devices/system/cpu")) -> tuple[str, str] | None:
    """(package, core) of a logical CPU, from sysfs; None where it cannot be read."""
    topology = sysfs / f"cpu{cpu}" / "topology"
    try:
        return (topology / "physical_package_id").read_text().strip(), (topology / "core_id").read_text().strip()
    except OSError:
        return None


def one_per_core(cpus: Sequence[int], core_of: Callable[[int], tuple[str, str] | None] = physical_core) -> list[int]:
    """The lowest logical CPU of each physical core (SMT siblings left out, as vLLM's "auto" does on x86)."""
    seen: set[tuple[str, str]] = set()
    out: list[int] = []
    for cpu in sorted(cpus):
        core = core_of(cpu)
        if core is None or core not in seen:
            out.append(cpu)
        if core is not None:
            seen.add(core)
    return out


def cpu_slices(engines: int, cpus: Sequence[int]) -> list[list[int]]:
    """Each engine's cores: disjoint runs of len(cpus) // engines, in order (so that on the usual layouts, where a
    NUMA node's cores are numbered together, N engines on N nodes get a node each), with at least one core left
    over for the rest when there are more cores than engines (taken from the last run when none is)."""
    if engines < 1 or not cpus:
        return [[] for _ in range(engines)]
    if len(cpus) <= engines:
        return [[cpus[i % len(cpus)]] for i in range(engines)]
    per = len(cpus) // engines
    slices = [list(cpus[i * per : (i + 1) * per]) for i in range(engines)]
    if per * engines == len(cpus):
        slices[-1].pop()
    return slices


def omp_binds(
    engines: int,
    environ: Mapping[str, str] = os.environ,
    allowed: Callable[[], set[int]] = allowed_cpus,
    core_of: Callable[[int], tuple[str, str] | None] = physical_core,
) -> list[str | None]:
    """Each engine's VLLM_CPU_OMP_THREADS_BIND ("0,1,2"); None for each where nothing is to be set (one engine,
    or the operator set it)."""
    if engines < 2 or OMP_BIND in environ:
        return [None] * engines
    return [",".join(map(str, s)) for s in cpu_slices(engines, one_per_core(sorted(allowed()), core_of))]
