"""The CPU side of a plan: the streams a box's cores carry, next to the streams its GPUs' memory admits.

Every sidecar front end and every service worker is one Python process under one GIL, so each tops out
near one core whatever the GPU; a box needs enough of each that the CPU never binds before GPU memory.
Per-stream costs as measured in docs/benchmarks.md (section 2, "The front end with its own step driver": 80 ms
chunks, an interim result per text token, CPU per stream per second of audio at N = 8): a sidecar front end
14-15 millicores per stream (AsyncLLM, the direct step driver, the frames transport; 13-15 before the frames
transport and the step driver at N = 8-10 as cores ÷ N, 24 before the direct renderer), a service worker 9-10.
A process's event loop saturates at about 0.8 of a core (section 1), so plans stop there.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

FRONT_END_MC_PER_STREAM = 14  # millicores per stream in a sidecar front end
SERVICE_MC_PER_STREAM = 9  # millicores per stream in a service worker
PROCESS_MC = 800  # what one Python process's loop sustains before it lags
ENGINE_CORE_MC = 1000  # each engine's EngineCore process: a busy scheduling loop, about a core on a GPU box


@dataclass(frozen=True)
class CpuPlan:
    cores: int
    gpus: int
    gpu_streams: int  # what the GPUs' memory admits, all of them together
    cpu_streams: int  # what the cores carry once each engine's EngineCore has its core
    streams_per_front_end: int
    streams_per_worker: int
    front_ends_per_engine: int  # to carry each engine's share of the streams
    workers: int
    binds: str  # "cpu" or "gpu memory"
    front_end_mc: int = FRONT_END_MC_PER_STREAM  # the per-stream costs the plan priced
    service_mc: int = SERVICE_MC_PER_STREAM

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def cpu_plan(
    cores: int,
    gpus: int,
    streams_per_gpu: int,
    front_end_mc: int = FRONT_END_MC_PER_STREAM,
    service_mc: int = SERVICE_MC_PER_STREAM,
) -> CpuPlan:
    """The CPU ceiling, and front ends per engine and service workers for the streams the box can hold.
    The per-stream costs default to this project's measurement; a box's own (bench/gpu_recipe.sh, `voxgate
    bench`'s cores per role ÷ streams) can be given instead."""
    if cores <= 0 or gpus <= 0:
        raise ValueError("--cpu-cores and --gpus must be positive")
    if front_end_mc <= 0 or service_mc <= 0:
        raise ValueError("--front-end-mc and --service-mc must be positive")
    gpu_streams = gpus * streams_per_gpu
    spare_mc = max(cores * 1000 - gpus * ENGINE_CORE_MC, 0)
    cpu_streams = spare_mc // (front_end_mc + service_mc)
    streams = min(gpu_streams, cpu_streams)
    per_front_end, per_worker = PROCESS_MC // front_end_mc, PROCESS_MC // service_mc
    return CpuPlan(
        cores,
        gpus,
        gpu_streams,
        cpu_streams,
        per_front_end,
        per_worker,
        front_ends_per_engine=max(math.ceil(streams / gpus / max(per_front_end, 1)), 1),
        workers=max(math.ceil(streams / max(per_worker, 1)), 1),
        binds="cpu" if cpu_streams < gpu_streams else "gpu memory",
        front_end_mc=front_end_mc,
        service_mc=service_mc,
    )


def render_cpu(plan: CpuPlan) -> list[str]:
    return [
        f"CPU: {plan.cores} cores, {plan.gpus} GPU(s): cores carry {plan.cpu_streams} streams "
        f"({plan.front_end_mc} + {plan.service_mc} millicores each, one core per EngineCore), "
        f"GPU memory admits {plan.gpu_streams}: {plan.binds} binds",
        f"  one front end carries ~{plan.streams_per_front_end} streams, one service worker ~{plan.streams_per_worker}:"
        f" use --engine-option frontends={plan.front_ends_per_engine} per engine and --workers {plan.workers}"
        + (" --gpus all" if plan.gpus > 1 else ""),
    ]
