"""CPU and RSS of the bench and the server's processes, by role, sampled over time.

Roles: `bench` (this process: the load generator), `service` (the voxgate server),
`sidecar` (its engine sidecar), `engine` (the sidecar's children, e.g. vLLM's
EngineCore), `other` (the server's other children), `bench-children` (this
process's children outside the servers: an engine run in-process, as
bench/overhead.py does), and for each further server given its own two roles.
Read from /proc (Linux).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..sidecar_process import SIDECAR_MODULE

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass(frozen=True)
class ProcSample:
    pid: int
    ppid: int
    cpu_s: float
    rss_bytes: int
    cmdline: str
    comm: str = ""  # the process's title (vLLM names its processes, e.g. VLLM::EngineCore)


def read_proc(pid: int) -> ProcSample | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        statm = Path(f"/proc/{pid}/statm").read_text().split()
    except (OSError, ValueError):
        return None
    return ProcSample(
        pid,
        int(fields[1]),
        (int(fields[11]) + int(fields[12])) / _TICK,
        int(statm[1]) * _PAGE,
        cmd,
        stat[stat.index("(") + 1 : stat.rindex(")")],
    )


def processes() -> dict[int, ProcSample]:
    """Every process now, by pid (those that vanish meanwhile are left out)."""
    return {pid: s for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()) if (s := read_proc(pid)) is not None}


def is_sidecar(cmdline: str) -> bool:
    """The engine sidecar's command line: `python -m engine_sidecar ...` (or `voxgate sidecar ...`)."""
    words = cmdline.split()
    return (
        any(a == "-m" and b == SIDECAR_MODULE for a, b in zip(words, words[1:], strict=False))
        or "sidecar" in words[1:4]
    )


# Another server this process started: (its pid, its role, its descendants' role), e.g. vLLM's own server.
OtherServer = tuple[int | None, str, str]


def _always(role: str) -> Callable[[str, ProcSample], str]:
    return lambda _parent, _sample: role


def snapshot(server_pid: int | None, others: Sequence[OtherServer] = ()) -> dict[str, tuple[float, int]]:
    """{role: (CPU seconds so far, RSS bytes)} for this process and its process tree, by role (module doc)."""
    procs = processes()
    children: dict[int, list[int]] = {}
    for s in procs.values():
        children.setdefault(s.ppid, []).append(s.pid)
    out: dict[str, tuple[float, int]] = {}
    seen: set[int] = set()

    def walk(root: int, role: str, child_role: Callable[[str, ProcSample], str]) -> None:
        stack = [(root, role)]
        while stack:
            pid, r = stack.pop()
            seen.add(pid)
            cpu, rss = out.get(r, (0.0, 0))
            out[r] = (cpu + procs[pid].cpu_s, rss + procs[pid].rss_bytes)
            stack += [(c, child_role(r, procs[c])) for c in children.get(pid, []) if c not in seen]

    def voxgate_role(parent: str, s: ProcSample) -> str:
        if parent == "service":
            return "sidecar" if is_sidecar(s.cmdline) else "other"
        return "engine" if parent == "sidecar" else parent

    if server_pid in procs:
        walk(server_pid, "service", voxgate_role)
    for pid, role, below in others:
        if pid in procs:
            walk(pid, role, _always(below))
    if (me := os.getpid()) in procs:  # last: the servers' trees are taken
        walk(me, "bench", _always("bench-children"))
    return out


@dataclass
class ProcSampler:
    """Samples `snapshot` every `interval_s`; `series` holds (t, {role: (cores, rss MiB)})."""

    server_pid: int | None
    interval_s: float = 1.0
    series: list[tuple[float, dict[str, tuple[float, float]]]] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        t0 = time.monotonic()
        prev_t, prev = t0, await asyncio.to_thread(snapshot, self.server_pid)
        while True:
            await asyncio.sleep(self.interval_s)
            now, cur = time.monotonic(), await asyncio.to_thread(snapshot, self.server_pid)
            dt = max(now - prev_t, 1e-6)
            self.series.append(
                (
                    round(now - t0, 2),
                    {
                        role: (round((cpu - prev.get(role, (cpu, 0))[0]) / dt, 3), round(rss / 2**20, 1))
                        for role, (cpu, rss) in cur.items()
                    },
                )
            )
            prev_t, prev = now, cur

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> dict[str, dict[str, float]]:
        """Stops; per role: mean and max CPU cores, max RSS MiB over the samples."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        roles = sorted({r for _, d in self.series for r in d})
        out: dict[str, dict[str, float]] = {}
        for role in roles:
            vals = [d[role] for _, d in self.series if role in d]
            out[role] = {
                "cpu_cores_mean": round(sum(c for c, _ in vals) / len(vals), 3),
                "cpu_cores_max": max(c for c, _ in vals),
                "rss_mib_max": max(m for _, m in vals),
            }
        return out
