"""Which engines a service runs: `--engines N` (on the CPU, for tests) and `--gpus all|0,1,…` (one per GPU).

Each engine is a sidecar of its own, with its own socket; a pinned one sees only its GPU
(CUDA_VISIBLE_DEVICES in its environment), so each vLLM engine lands on its own device.

A service started with CUDA_VISIBLE_DEVICES already set (Kubernetes' NVIDIA device plugin, Docker `--gpus`,
Slurm) may use only those devices, though nvidia-smi may list every GPU of the node: `all` is then its
entries, and `--gpus 0,1` indexes into them as CUDA does (index i of the visible list). Several Voxtral engines
on the CPU each get their own cores instead (service/cpu_slices.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .config import Config
from .cpu_slices import OMP_BIND, allowed_cpus, omp_binds

NVIDIA_SMI_TIMEOUT_S = 30.0
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"


class EngineLayoutError(ValueError):
    """--engines / --gpus that cannot be honoured (inconsistent, or no GPU to count)."""


@dataclass(frozen=True)
class EngineSpec:
    index: int
    gpu: str | None  # the device its sidecar sees (CUDA_VISIBLE_DEVICES); None: not pinned
    socket: str  # its Unix socket; "": a private temp dir
    cpus: str | None = None  # its vLLM-CPU worker's cores (VLLM_CPU_OMP_THREADS_BIND); None: vLLM's own choice

    @property
    def env(self) -> dict[str, str]:
        env = {CUDA_VISIBLE_DEVICES: self.gpu} if self.gpu is not None else {}
        if self.cpus is not None:
            env[OMP_BIND] = self.cpus
        return env


def nvidia_smi_gpu_count() -> int:
    """GPUs `nvidia-smi -L` lists (one `GPU n: …` line each)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        raise EngineLayoutError(
            "--gpus all: nvidia-smi is not on PATH, so the GPUs cannot be counted; "
            "name them (--gpus 0,1) or use --engines N"
        )
    try:
        out = subprocess.run(
            [exe, "-L"], capture_output=True, text=True, check=True, timeout=NVIDIA_SMI_TIMEOUT_S
        ).stdout
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        raise EngineLayoutError(f"--gpus all: `nvidia-smi -L` failed: {exc}") from exc
    count = sum(line.startswith("GPU ") for line in out.splitlines())
    if count == 0:
        raise EngineLayoutError("--gpus all: `nvidia-smi -L` lists no GPU")
    return count


def visible_devices(environ: Mapping[str, str]) -> tuple[str, ...] | None:
    """The devices this process may use, as CUDA_VISIBLE_DEVICES names them (ids, UUIDs, MIG names), in order;
    None when it is unset (every GPU of the box). As CUDA reads it, the list ends at its first empty or
    negative entry, so "" and "-1" make no GPU visible."""
    value = environ.get(CUDA_VISIBLE_DEVICES)
    if value is None:
        return None
    visible: list[str] = []
    for entry in (e.strip() for e in value.split(",")):
        if not entry or entry.startswith("-"):
            break
        visible.append(entry)
    return tuple(visible)


def gpu_list(
    gpus: str, count_gpus: Callable[[], int] = nvidia_smi_gpu_count, environ: Mapping[str, str] = os.environ
) -> tuple[str, ...]:
    """The devices `--gpus` names, each as its sidecar's CUDA_VISIBLE_DEVICES: "" none; "all" every device this
    process may use (CUDA_VISIBLE_DEVICES' entries if set, else every GPU nvidia-smi lists); else ids or UUIDs,
    comma-separated, an id being an index into CUDA_VISIBLE_DEVICES when that is set."""
    gpus = gpus.strip()
    if not gpus:
        return ()
    visible = visible_devices(environ)
    allotted = f"{CUDA_VISIBLE_DEVICES}={environ.get(CUDA_VISIBLE_DEVICES)!r}"
    if visible == ():
        raise EngineLayoutError(f"--gpus {gpus}: {allotted} makes no GPU visible to this process")
    if gpus == "all":
        return visible if visible is not None else tuple(str(i) for i in range(count_gpus()))
    devices = tuple(d.strip() for d in gpus.split(","))
    if any(not d for d in devices) or len(set(devices)) != len(devices):
        raise EngineLayoutError(f"--gpus {gpus!r}: give distinct device ids, comma-separated (or 'all')")
    if visible is None:
        return devices
    pinned = tuple(_visible_device(d, visible, gpus, allotted) for d in devices)
    if len(set(pinned)) != len(pinned):
        raise EngineLayoutError(f"--gpus {gpus!r}: names one device twice ({allotted})")
    return pinned


def _visible_device(device: str, visible: tuple[str, ...], gpus: str, allotted: str) -> str:
    """`--gpus` entry `device` under CUDA_VISIBLE_DEVICES: an index picks that visible entry (verbatim, so a UUID
    stays one); a UUID must be one of them. Pinning a sidecar to anything else would leave this process's share."""
    if device.isdigit():
        if int(device) >= len(visible):
            raise EngineLayoutError(
                f"--gpus {gpus!r}: device {device} is past the {len(visible)} this process may "
                f"use ({allotted}; an id is an index into it, 0 to {len(visible) - 1})"
            )
        return visible[int(device)]
    if device not in visible:
        raise EngineLayoutError(
            f"--gpus {gpus!r}: {device} is not one of the devices this process may use ({allotted})"
        )
    return device


def engine_socket(socket: str, index: int, count: int) -> str:
    """Engine `index`'s socket: --sidecar-socket itself for one engine, `<socket>.<index>` for several."""
    return socket if not socket or count == 1 else f"{socket}.{index}"


def engine_specs(
    c: Config,
    count_gpus: Callable[[], int] = nvidia_smi_gpu_count,
    environ: Mapping[str, str] = os.environ,
    allowed: Callable[[], set[int]] = allowed_cpus,
) -> tuple[EngineSpec, ...]:
    """One spec per engine. With --gpus, one engine per device; --engines must then be 1 (its default) or
    the number of devices. Several Voxtral engines without GPUs get disjoint cores (service/cpu_slices.py)."""
    if c.engines < 1:
        raise EngineLayoutError(f"--engines {c.engines}: at least 1")
    devices = gpu_list(c.gpus, count_gpus, environ)
    if devices and c.engines not in (1, len(devices)):
        raise EngineLayoutError(
            f"--engines {c.engines} with --gpus {c.gpus} ({len(devices)} devices): one engine "
            "per GPU; leave --engines out or make it the number of GPUs"
        )
    count = len(devices) or c.engines
    pins: tuple[str | None, ...] = devices or (None,) * count
    binds = omp_binds(count, environ, allowed) if c.engine == "voxtral" and not devices else [None] * count
    return tuple(
        EngineSpec(i, gpu, engine_socket(c.sidecar_socket, i, count), cpus)
        for i, (gpu, cpus) in enumerate(zip(pins, binds, strict=True))
    )
