"""`voxgate bench`: arguments, the concurrency sweep, the JSON report and its plots."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import json
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .machine import describe

if TYPE_CHECKING:  # the heavy imports (numpy, grpc) wait for `voxgate bench` itself
    from .driver import LevelResult
    from .server import ServerProc


# interim latency p95 a session may have and keep up: the fake engine answers at once; Voxtral's own delay is
# 480 ms; PocketSphinx revises its hypothesis in bursts about a second apart.
DEFAULT_LATENCY_P95_S = {"fake": 0.25, "voxtral": 1.0, "remote": 1.0, "sphinx": 2.0, "whisper": 2.0}


def _ints(text: str) -> list[int]:
    return sorted({int(x) for x in text.split(",") if x.strip()})


def add_bench_arguments(p: argparse.ArgumentParser) -> None:
    target = p.add_argument_group("server under test (one of)")
    target.add_argument("--server", metavar="HOST:PORT", help="a running voxgate server")
    target.add_argument(
        "--engine",
        choices=("fake", "whisper", "sphinx", "voxtral"),
        default="fake",
        help="start `voxgate serve --engine ENGINE` on a free port (default fake: answers at once)",
    )
    target.add_argument(
        "--model",
        default="",
        help="model for --engine (voxtral: checkpoint dir; fake: a script; default: a script with a word every 400 ms)",
    )
    target.add_argument(
        "--serve-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for `voxgate serve` (repeatable, e.g. --serve-arg=--max-num-seqs=16)",
    )
    target.add_argument("--server-pid", type=int, help="with --server: its pid, to sample its CPU and RSS")
    target.add_argument(
        "--ready-timeout-s", type=float, default=300.0, help="wait this long for the server to be SERVING (default 300)"
    )
    load = p.add_argument_group("load")
    load.add_argument("--sessions", "-n", type=int, default=4, help="concurrent sessions (default 4)")
    load.add_argument(
        "--sweep",
        type=_ints,
        metavar="N,N,...",
        help="concurrency levels instead of --sessions, stopping at the first lost (twice) level",
    )
    load.add_argument("--duration", type=float, default=20.0, help="audio seconds per session (default 20)")
    load.add_argument("--speed", type=float, default=1.0, help="pace: 1 = real time (default), 2 = twice as fast")
    load.add_argument("--frame-ms", type=int, default=20, help="audio per message, ms (default 20)")
    load.add_argument(
        "--stagger-s",
        type=float,
        default=0.0,
        help="start of session i is i x this (default 0: starts spread over 2 s), plus a random phase within a frame",
    )
    load.add_argument("--language", help="language_code of every session (default: the server's English)")
    load.add_argument(
        "--audio-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="16 kHz mono PCM16 WAV files of speech, played as one loop (default: the ~17 s of "
        "clips shipped with voxgate, service/bench/clips)",
    )
    load.add_argument(
        "--sessions-per-connection",
        type=int,
        default=None,
        metavar="N",
        help="sessions sharing one client TCP connection (default: the driver's "
        "SESSIONS_PER_CONNECTION; `voxgate serve --workers` spreads connections, not sessions)",
    )
    load.add_argument("--retries", type=int, default=1, help="reruns of a lost level before the sweep stops")
    judge = p.add_argument_group("keeping up (a level is held when every session does)")
    judge.add_argument(
        "--max-latency-p95-s",
        type=float,
        default=None,
        help="interim latency p95 per session (default by engine, a --server's as it says: fake 0.25, voxtral "
        "1.0, sphinx and whisper 2.0; 1.0 for an engine it does not know)",
    )
    judge.add_argument("--max-final-s", type=float, default=2.0, help="end of audio → last final (default 2.0)")
    judge.add_argument("--max-slip-s", type=float, default=0.5, help="a send late against real time (default 0.5)")
    judge.add_argument(
        "--ref-shift-ms",
        type=int,
        default=None,
        help="engine's own offset of a result's end past its audio (default: fake 300, else 0)",
    )
    out = p.add_argument_group("output")
    out.add_argument("--out", type=Path, help="JSON report path (default bench/results/bench-<engine>-<stamp>.json)")
    out.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    out.add_argument("--quiet", action="store_true", help="no progress on stderr")


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def level_line(r: LevelResult) -> str:
    def ms(x: float | None) -> str:
        return "-" if x is None else f"{x * 1000:.0f}"

    srv = r.processes
    cpu = " ".join(f"{k} {v['cpu_cores_mean']:.2f}" for k, v in srv.items())
    return (
        f"  N={r.n:<4} {'HELD' if r.held else 'lost'} ({r.sessions_kept_up}/{r.n})  latency p50/p95/p99 "
        f"{ms(r.latency_p50_s)}/{ms(r.latency_p95_s)}/{ms(r.latency_p99_s)} ms  first p50 "
        f"{ms(r.first_result_p50_s)} ms  final p50/max {ms(r.final_p50_s)}/{ms(r.final_max_s)} ms  "
        f"slip {ms(r.slip_max_s)} ms  cores {cpu}  load {r.load_avg_1m_after:.1f}"
        + (f"  errors {r.errors}" if r.errors else "")
    )


async def _sweep(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from .audio import load_loop
    from .driver import SESSIONS_PER_CONNECTION, Plan, pick_language, run_level, server_engine
    from .server import FAKE_WORD_MS, ServerProc, wait_serving, write_fake_script
    from .trace import Thresholds

    loop = load_loop(args.audio_dir) if args.audio_dir else load_loop()
    levels = args.sweep or [args.sessions]
    engine = "remote" if args.server else args.engine
    lat_th = args.max_latency_p95_s if args.max_latency_p95_s is not None else DEFAULT_LATENCY_P95_S[engine]
    ref_shift = args.ref_shift_ms if args.ref_shift_ms is not None else (FAKE_WORD_MS if engine == "fake" else 0)
    plan = Plan(
        duration_s=args.duration,
        frame_ms=args.frame_ms,
        speed=args.speed,
        stagger_s=args.stagger_s,
        timeout_s=60.0,
        thresholds=Thresholds(lat_th, args.max_final_s, args.max_slip_s),
        ref_shift_ms=ref_shift,
        progress=not args.quiet,
        sessions_per_connection=args.sessions_per_connection or SESSIONS_PER_CONNECTION,
    )
    server: ServerProc | None = None
    model = args.model
    if not args.server:
        if args.engine == "fake" and not model:
            model = str(write_fake_script(tmp / "fake-script.json", args.duration * args.speed + 5))
        log = Path(tempfile.gettempdir()) / f"voxgate-bench-serve-{dt.datetime.now():%Y%m%d-%H%M%S}.log"
        server = ServerProc.for_engine(args.engine, model, max(levels), log, args.serve_arg)
        _say(f"starting {' '.join(server.cmd[1:])} (log {log}) ...")
        await server.start(args.ready_timeout_s)
        target, server_pid = server.target, server.pid
        _say(f"  ready in {server.ready_s:.1f} s on {target}")
    else:
        target, server_pid = args.server, args.server_pid
        await wait_serving(target, args.ready_timeout_s)
        if args.max_latency_p95_s is None:  # judged as the engine it runs (the default server: PocketSphinx)
            engine = await server_engine(target) or "remote"
            latency = DEFAULT_LATENCY_P95_S.get(engine, DEFAULT_LATENCY_P95_S["remote"])
            plan = dataclasses.replace(plan, thresholds=dataclasses.replace(plan.thresholds, latency_p95_s=latency))
    plan = dataclasses.replace(plan, language=await pick_language(target, args.language))
    results: list[LevelResult] = []
    t_begin = time.monotonic()
    try:
        for n in levels:
            for attempt in range(1, args.retries + 2):
                _say(
                    f"level N={n} (attempt {attempt}): {args.duration:g} s of audio at {args.speed:g}x, "
                    f"{args.frame_ms} ms frames"
                )
                r = await run_level(target, n, attempt, loop, plan, server_pid)
                results.append(r)
                _say(level_line(r))
                if r.held:
                    break
                await asyncio.sleep(2.0)
            else:
                break
    finally:
        if server is not None:
            await server.stop()
    held = [r.n for r in results if r.held]
    return {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "command": "voxgate bench " + " ".join(sys.argv[2:] if sys.argv[1:2] == ["bench"] else sys.argv[1:]),
        "machine": describe(),
        "engine": engine,
        "model": model or None,
        "target": target,
        "server_ready_s": server.ready_s if server is not None else None,
        "duration_s": args.duration,
        "speed": args.speed,
        "frame_ms": args.frame_ms,
        "stagger_s": args.stagger_s,
        "ref_shift_ms": ref_shift,
        "language": plan.language,
        "thresholds": asdict(plan.thresholds),
        "levels_requested": levels,
        "max_sessions_held": max(held, default=0),
        "runtime_s": round(time.monotonic() - t_begin, 1),
        "levels": [asdict(r) for r in results],
    }


def run_bench(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="voxgate-bench-") as tmp:
        report = asyncio.run(_sweep(args, Path(tmp)))
    out: Path = args.out or (
        Path("bench") / "results" / f"bench-{report['engine']}-{dt.datetime.now():%Y%m%d-%H%M%S}.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, separators=(",", ":")) + "\n")  # compact: thousands of samples
    _say(f"wrote {out}")
    if not args.no_plots:
        from .plots import write_plots

        plots = write_plots(report, out.parent, out.stem)
        _say("plots: " + (", ".join(map(str, plots)) if plots else "skipped (pip install 'voxgate[bench]')"))
    failed = sum(sum(lv["errors"].values()) for lv in report["levels"])
    print(
        json.dumps(
            {
                "max_sessions_held": report["max_sessions_held"],
                "levels": [
                    {k: lv[k] for k in ("n", "held", "latency_p50_s", "latency_p99_s", "final_p99_s", "errors")}
                    for lv in report["levels"]
                ],
                "report": str(out),
            }
        )
    )
    return 0 if not failed else 1
