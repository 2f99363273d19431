"""The machine a benchmark ran on, for its report."""

from __future__ import annotations

import contextlib
import os
import platform
from pathlib import Path
from typing import Any


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux; else what platform knows)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def describe(**extra: Any) -> dict[str, Any]:
    """CPUs (all, and usable by this process), CPU model, platform, Python, load averages; plus `extra`."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpus": os.cpu_count(),
        "cpus_usable": usable,
        "cpu": cpu_model(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        **extra,
    }
