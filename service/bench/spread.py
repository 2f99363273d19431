"""One bench level's sessions spread over K load-generator processes, so the client is not what binds.

One asyncio process drives a few hundred 20 ms streams before its own CPU is the limit (~100 µs a message, as
the server's); a many-core box needs several to find the server's ceiling. Each child runs `run_level` on its
share of the sessions and prints its summary as JSON; the parent merges them into one `Outcome`. With K = 1
the level runs in this process, as before.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from .driver import LevelResult, Plan, run_level
from .trace import Thresholds, pct

CHILD_FLAG = "--spread-child"  # `python -m service.bench.spread --spread-child` reads one job on stdin


@dataclass(frozen=True)
class Outcome:
    """What a bench run reports of a level, whether one process drove it or K did."""

    n: int
    sessions_kept_up: int
    errors: dict[str, int]
    latency_p50_s: float | None
    latency_p95_s: float | None
    latency_p99_s: float | None
    final_max_s: float | None
    slip_max_s: float
    load_avg_1m_before: float
    load_avg_1m_after: float
    load_processes: int

    @property
    def held(self) -> bool:
        return self.sessions_kept_up == self.n


def shares(n: int, k: int) -> list[int]:
    """n sessions over k processes, as even as can be (no empty share)."""
    k = max(1, min(k, n))
    return [n // k + (1 if i < n % k else 0) for i in range(k)]


async def drive(target: str, n: int, plan: Plan, loop: np.ndarray, processes: int) -> Outcome:
    if processes <= 1:
        return _outcome([_share(await run_level(target, n, 1, loop, plan, None))], 1)
    job, parts = {"target": target, "plan": dataclasses.asdict(plan)}, shares(n, processes)
    children = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "service.bench.spread",
            CHILD_FLAG,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        for _ in parts
    ]
    replies = await asyncio.gather(
        *(
            child.communicate(json.dumps({**job, "n": share}).encode())
            for child, share in zip(children, parts, strict=True)
        )
    )
    for child in children:
        if child.returncode != 0:
            raise RuntimeError(f"a load-generator process exited {child.returncode}")
    return _outcome([json.loads(out) for out, _ in replies], len(children))


def _share(r: LevelResult) -> dict[str, Any]:
    return {
        "n": r.n,
        "kept": r.sessions_kept_up,
        "errors": r.errors,
        "latencies": r.latencies,
        "final_max_s": r.final_max_s,
        "slip_max_s": r.slip_max_s,
        "load_before": r.load_avg_1m_before,
        "load_after": r.load_avg_1m_after,
    }


def _outcome(parts: list[dict[str, Any]], processes: int) -> Outcome:
    lats = [x for p in parts for x in p["latencies"]]
    errors: dict[str, int] = {}
    for p in parts:
        for kind, count in p["errors"].items():
            errors[kind] = errors.get(kind, 0) + count
    finals = [p["final_max_s"] for p in parts if p["final_max_s"] is not None]
    return Outcome(
        n=sum(p["n"] for p in parts),
        sessions_kept_up=sum(p["kept"] for p in parts),
        errors=errors,
        latency_p50_s=pct(lats, 50),
        latency_p95_s=pct(lats, 95),
        latency_p99_s=pct(lats, 99),
        final_max_s=max(finals) if finals else None,
        slip_max_s=max(p["slip_max_s"] for p in parts),
        load_avg_1m_before=max(p["load_before"] for p in parts),
        load_avg_1m_after=max(p["load_after"] for p in parts),
        load_processes=processes,
    )


def _child() -> int:
    from .audio import load_loop

    job = json.loads(sys.stdin.read())
    fields = dict(job["plan"])
    plan = Plan(**{**fields, "thresholds": Thresholds(**fields["thresholds"])})
    result = asyncio.run(run_level(job["target"], int(job["n"]), 1, load_loop(), plan, None))
    print(json.dumps(_share(result)))
    return 0


if __name__ == "__main__" and CHILD_FLAG in sys.argv:
    sys.exit(_child())
