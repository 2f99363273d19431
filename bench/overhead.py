#!/usr/bin/env python3
"""voxgate's overhead over the bare engine: the most concurrent real-time sessions each one holds.

One run, three ways of driving the same Voxtral checkpoint on vLLM, interleaved
level by level so all of them see the same machine state:

  raw      `AsyncLLM` driven directly in-process, exactly as vLLM's own realtime
           server drives it (the model's `buffer_realtime_audio`, lock-step token
           feedback, DELTA outputs): the engine's own limit.
  engine   the sidecar's `VoxtralEngine` driven in-process (the same object the
           sidecar owns): adds voxgate's engine wrapper (sessions, timing,
           backlog, watchdog), but no service and no IPC.
  voxgate  end to end through the public gRPC API against a `voxgate serve
           --engine voxtral` subprocess (service + sidecar + engine).
  vllm     vLLM's own realtime websocket server (`/v1/realtime` of `python -m
           vllm.entrypoints.openai.api_server`) on the same checkpoint, a
           subprocess: the alternative a user would otherwise deploy.

raw and engine share one AsyncLLM (one EngineCore); voxgate has its own, in
its sidecar, and vllm its own, in its server. Only one mode runs at a time;
the idle engines sleep.

Each level opens N desynchronized sessions (staggered starts, each at a
different point of the loop of real speech `voxgate bench` plays), sends
80 ms chunks paced in real time for --duration seconds, half-closes, and
waits for the end. Per session:

  lag        arrival wall time of each output token/result minus the wall time
             the audio it describes (its end offset) was sent. Includes the
             model's own transcription delay (480 ms) and the 80 ms framing.
  final      end of audio sent -> last output (raw: generate() ends; engine:
             Closed; voxgate: the last final result, as `voxgate bench`
             measures it; vllm: transcription.done), i.e. the right padding
             flushed.
  wall/audio (the end: Closed, SessionEnded, ... - first audio sent) / audio
             duration.
  slip       how late the sender sent a chunk against its real-time schedule
             (voxgate/engine apply backpressure when the engine falls behind).
  gap        time between consecutive outputs of one session (the per-step
             cadence: 80 ms of audio per engine step when keeping up).

A session keeps up when lag p95 <= --threshold-lag-s, final <= --threshold-final-s,
slip max <= --threshold-slip-s and nothing failed; a level is held when all its
sessions keep up. Each mode sweeps N upward until it loses a level.

    .venv/bin/python bench/overhead.py --duration 20 --repeats 2

Writes bench/results/overhead-<date>.json and prints a table.

The pieces are `voxgate bench`'s (service/bench: the audio loop, paced sending,
per-session traces and their summary, the server process, CPU by process role);
this file adds the modes and the sweep over them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import itertools
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import AsyncGenerator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "clients" / "python"))

from engine_api.audio import CHUNK_MS  # noqa: E402
from service.bench.audio import SAMPLE_RATE, frames, load_loop  # noqa: E402
from service.bench.driver import Plan as SessionPlan  # noqa: E402
from service.bench.driver import run_session, send_paced  # noqa: E402
from service.bench.machine import describe  # noqa: E402
from service.bench.procstats import snapshot  # noqa: E402
from service.bench.server import ServerProc, terminate  # noqa: E402
from service.bench.trace import SessionSummary, SessionTrace, Thresholds, pct, summarize  # noqa: E402

RESULTS_DIR = ROOT / "bench" / "results"
MODES = ("raw", "engine", "voxgate", "vllm")
# mode -> (engine options, service flags)
VOXGATE_MODES: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {"voxgate": ({}, ())}
DEFAULT_LEVELS = (1, 2, 3, 4, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 64)


# -- measurements ---------------------------------------------------------------


@dataclass
class Trace(SessionTrace):
    """`voxgate bench`'s session trace (a text output is an interim result; the end is `ended`), plus every
    token's arrival, blank ones too (raw and vllm modes)."""

    token_arrivals: list[float] = field(default_factory=list)


@dataclass
class LevelResult:
    mode: str
    n: int
    repeat: int
    held: bool
    sessions_kept_up: int
    lag_p50_s: float | None
    lag_p95_s: float | None  # over all outputs of all sessions
    worst_session_lag_p95_s: float | None
    final_p50_s: float | None
    final_max_s: float | None
    wall_over_audio_max: float | None
    slip_max_s: float
    gap_p50_ms: float | None
    gap_p95_ms: float | None
    token_gap_p50_ms: float | None  # raw/vllm only: between consecutive tokens (blank ones too) = per-step cadence
    token_gap_p95_ms: float | None
    outputs: int
    engine_steps_per_s: float | None  # raw/engine only (the in-process engine's stat logger)
    errors: list[str]
    wall_s: float
    attempt: int  # a lost level is run again (--retries) before the mode stops: one stall is not a limit
    cpu_cores: dict[str, float]  # CPU used during the level, in cores, by process role
    # CPU per stream per second of its audio, in millicores, by role: the level's CPU seconds ÷ (N × audio
    # seconds). Every step of every session runs (a lagging level runs them late), so this is the per-stream
    # cost at real time even for a level the engine could not hold.
    cpu_mc_per_stream: dict[str, float]
    load_avg_1m: float
    sessions: list[SessionSummary]


def gaps_ms(arrivals: list[float]) -> list[float]:
    return [1000 * (b - a) for a, b in itertools.pairwise(arrivals)]


def ms(values: list[float], q: float) -> float | None:
    p = pct(values, q)
    return None if p is None else round(p, 1)


def summarize_level(
    mode: str,
    n: int,
    repeat: int,
    traces: list[Trace],
    audio_s: float,
    th: Thresholds,
    wall_s: float,
    steps_per_s: float | None,
    cpu_s: dict[str, float],
) -> LevelResult:
    sessions = [summarize(t, audio_s, th) for t in traces]
    lags = [lat for t in traces for _, lat in t.latencies()]
    gaps = [g for t in traces for g in gaps_ms([a for a, _, final in t.results if not final])]
    token_gaps = [g for t in traces for g in gaps_ms(t.token_arrivals)]
    finals = [math.inf if s.final_s is None else s.final_s for s in sessions]
    walls = [s.wall_over_audio for s in sessions if s.wall_over_audio is not None]
    kept = sum(s.keeps_up for s in sessions)
    return LevelResult(
        mode=mode,
        n=n,
        repeat=repeat,
        held=kept == n,
        sessions_kept_up=kept,
        lag_p50_s=pct(lags, 50),
        lag_p95_s=pct(lags, 95),
        worst_session_lag_p95_s=max((s.latency_p95_s for s in sessions if s.latency_p95_s is not None), default=None),
        final_p50_s=pct(finals, 50),
        final_max_s=round(max(finals), 4),
        wall_over_audio_max=max(walls) if len(walls) == n else None,
        slip_max_s=max(s.slip_max_s for s in sessions),
        gap_p50_ms=ms(gaps, 50),
        gap_p95_ms=ms(gaps, 95),
        token_gap_p50_ms=ms(token_gaps, 50),
        token_gap_p95_ms=ms(token_gaps, 95),
        outputs=len(lags),
        engine_steps_per_s=None if steps_per_s is None else round(steps_per_s, 1),
        errors=sorted({s.error for s in sessions if s.error}),
        wall_s=round(wall_s, 1),
        attempt=1,
        cpu_cores={k: round(v / wall_s, 3) for k, v in sorted(cpu_s.items())},
        cpu_mc_per_stream={k: round(1000 * v / (n * audio_s), 1) for k, v in sorted(cpu_s.items())},
        load_avg_1m=os.getloadavg()[0],
        sessions=sessions,
    )


# -- the four modes ----------------------------------------------------------------


class Bare:
    """One VoxtralEngine in this process; raw mode drives its AsyncLLM directly."""

    def __init__(self, model: str, options: dict[str, Any], max_sessions: int) -> None:
        from engine_sidecar.engines import create_engine
        from engine_sidecar.engines.voxtral.options import VoxtralOptions

        self.engine: Any = create_engine("voxtral", model, max_sessions, VoxtralOptions.from_mapping(options))

    async def start(self) -> None:
        await self.engine.start()

    async def stop(self) -> None:
        await self.engine.shutdown()

    def steps(self) -> int:
        return int(self.engine.scheduler.steps)

    def unfinished(self) -> int:
        return int(self.engine.counters()["engine_unfinished"])

    async def engine_session(self, trace: Trace, chunks: list[bytes], t0: float, tag: str) -> None:
        from engine_api.outputs import Closed, Delta

        session = await self.engine.open_session(tag, "en")

        async def read() -> None:
            async for out in session.outputs():
                if isinstance(out, Delta):
                    trace.results.append((time.monotonic(), out.end_ms, False))
                elif isinstance(out, Closed):
                    trace.ended = time.monotonic()

        reader = asyncio.create_task(read())
        try:
            await send_paced(trace, chunks, t0, CHUNK_MS / 1000, lambda pcm: session.push_audio(pcm, True))
            trace.end_sent = time.monotonic()
            await session.close()
            await reader
        finally:
            if not reader.done():
                reader.cancel()
                await session.abort()

    async def raw_session(self, trace: Trace, chunks: list[bytes], t0: float, tag: str) -> None:
        """What vLLM's own /v1/realtime server does per connection (serving.py + connection.py)."""
        from vllm import SamplingParams
        from vllm.engine.protocol import StreamingInput
        from vllm.renderers.inputs.preprocess import parse_model_prompt
        from vllm.sampling_params import RequestOutputKind

        ctx = self.engine._ctx
        llm, model_cls, geometry = ctx.llm, ctx.model_cls, ctx.geometry
        config = llm.model_config
        audio: asyncio.Queue[np.ndarray | None] = asyncio.Queue()  # unbounded, as in vLLM's server
        feedback: asyncio.Queue[list[int]] = asyncio.Queue()
        audio_ms = len(chunks) * CHUNK_MS

        async def audio_stream() -> AsyncGenerator[np.ndarray, None]:
            while (chunk := await audio.get()) is not None:
                yield chunk

        async def inputs() -> AsyncGenerator[Any, None]:
            async for prompt in model_cls.buffer_realtime_audio(audio_stream(), feedback, config):
                (engine_input,) = await llm.renderer.render_cmpl_async([parse_model_prompt(config, prompt)])
                yield StreamingInput(prompt=engine_input)

        async def push(pcm: bytes) -> None:
            audio.put_nowait(np.frombuffer(pcm, dtype=np.int16).astype(np.float32) / 32768.0)

        async def generate() -> None:
            params = SamplingParams(
                temperature=0.0, max_tokens=model_cls.realtime_max_tokens, output_kind=RequestOutputKind.DELTA
            )
            k = 0
            async for out in llm.generate(prompt=inputs(), sampling_params=params, request_id=tag):
                if not out.outputs or not out.outputs[0].token_ids:
                    continue
                ids = list(out.outputs[0].token_ids)
                feedback.put_nowait(ids)
                now = time.monotonic()
                k += len(ids)
                trace.token_arrivals += [now] * len(ids)
                if out.outputs[0].text:  # what becomes a Delta in the engine and a result in voxgate
                    # The audio time the engine wrapper gives token k (engine_sidecar/engines/voxtral/timing.py).
                    trace.results.append((now, max(0, min(geometry.token_end_ms(k - 1), audio_ms)), False))
            trace.ended = time.monotonic()

        gen = asyncio.create_task(generate())
        try:
            await send_paced(trace, chunks, t0, CHUNK_MS / 1000, push)
            trace.end_sent = time.monotonic()
            audio.put_nowait(None)
            await gen
        finally:
            if not gen.done():
                gen.cancel()
                with contextlib.suppress(BaseException):
                    await gen


class Voxgate:
    """`voxgate serve --engine voxtral` as a subprocess, driven through the public gRPC API as `voxgate bench`
    drives it."""

    def __init__(
        self,
        model: str,
        max_n: int,
        max_model_len: int,
        engine_options: dict[str, Any],
        log_path: Path,
        flags: tuple[str, ...] = (),
    ) -> None:
        extra = [
            "--max-model-len",
            str(max_model_len),
            "--max-num-seqs",
            str(max_n),
            *itertools.chain.from_iterable(
                ("--engine-option", f"{k}={json.dumps(v)}") for k, v in engine_options.items()
            ),
            *flags,
        ]
        self.server = ServerProc.for_engine("voxtral", model, max_n, log_path, extra)
        self.channel: Any = None

    async def wait_ready(self, timeout_s: float = 300) -> None:
        import grpc.aio

        await self.server.wait_ready(timeout_s)
        self.channel = grpc.aio.insecure_channel(self.server.target)

    async def stop(self) -> None:
        if self.channel is not None:
            await self.channel.close()
        await self.server.stop()

    async def session(self, trace: Trace, chunks: list[bytes], t0: float, plan: SessionPlan) -> None:
        await run_session(self.channel, trace, chunks, t0, plan)


class VllmRealtime:
    """vLLM's own realtime server as a subprocess (the CPU environment the sidecar gives its engine),
    driven with bench/vllm_realtime.py's protocol client."""

    def __init__(self, model: str, max_n: int, max_model_len: int, log_path: Path) -> None:
        self.model = model
        self.port = free_port()
        self.cmd = [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            model,
            "--tokenizer-mode",
            "mistral",
            "--config-format",
            "mistral",
            "--load-format",
            "mistral",
            "--max-model-len",
            str(max_model_len),
            "--max-num-seqs",
            str(max_n),
            "--enforce-eager",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        self.log_path = log_path
        self.proc: Any = None
        self.geometry: Any = None

    def launch(self) -> None:
        import subprocess

        from engine_sidecar.engines.voxtral.procs import set_env_defaults

        saved = dict(os.environ)
        set_env_defaults(cpu=True)  # the same environment the sidecar gives its engine
        env = dict(os.environ)
        os.environ.clear()
        os.environ.update(saved)
        with self.log_path.open("w") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)

    async def wait_ready(self, timeout_s: float = 300) -> None:
        import urllib.request

        from bench.vllm_realtime import geometry

        self.geometry = geometry(self.model)
        deadline = time.monotonic() + timeout_s
        url = f"http://127.0.0.1:{self.port}/health"
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"vLLM's server exited; see {self.log_path}")
            with contextlib.suppress(OSError):
                if await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=2).status) == 200:
                    break
            await asyncio.sleep(1)
        else:
            raise RuntimeError(f"vLLM's server not ready after {timeout_s} s; see {self.log_path}")
        # Its first session sees its first delta seconds late (warm-up): spend that outside the measurement.
        warm = Trace(index=-1, offset_s=0.0, frame_ms=CHUNK_MS)
        await self.session(warm, frames(load_loop(), 0, 3.0, CHUNK_MS), time.monotonic())
        if warm.error:
            raise RuntimeError(f"vLLM's server warm-up session failed: {warm.error}")

    async def stop(self) -> None:
        await terminate(self.proc)

    async def session(self, trace: Trace, chunks: list[bytes], t0: float) -> None:
        from bench.vllm_realtime import session

        await session(
            f"ws://127.0.0.1:{self.port}/v1/realtime",
            self.model,
            self.geometry,
            trace,
            chunks,
            t0,
            CHUNK_MS,
            tokens=trace.token_arrivals,
        )


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- the sweep -----------------------------------------------------------------


@dataclass
class Plan:
    duration_s: float
    stagger_s: float
    session_timeout_s: float
    thresholds: Thresholds


async def run_level(
    mode: str,
    n: int,
    repeat: int,
    bare: Bare | None,
    voxes: dict[str, Voxgate],
    vllm_server: VllmRealtime | None,
    loop: np.ndarray,
    plan: Plan,
) -> LevelResult:
    traces = [Trace(index=i, offset_s=round(i * len(loop) / n / SAMPLE_RATE, 2), frame_ms=CHUNK_MS) for i in range(n)]
    start = time.monotonic() + 0.5
    steps0 = bare.steps() if bare is not None and mode in ("raw", "engine") else 0
    vox = voxes.get(mode)
    serve_pid = vox.server.pid if vox is not None else None
    vllm_pid = vllm_server.proc.pid if vllm_server is not None and vllm_server.proc is not None else None

    def cpu_seconds() -> dict[str, float]:
        return {role: cpu for role, (cpu, _) in snapshot(serve_pid, [(vllm_pid, "vllm-server", "vllm-engine")]).items()}

    cpu0 = cpu_seconds()
    session_plan = SessionPlan(
        duration_s=plan.duration_s,
        frame_ms=CHUNK_MS,
        speed=1.0,
        stagger_s=plan.stagger_s,
        timeout_s=plan.session_timeout_s,
        thresholds=plan.thresholds,
        ref_shift_ms=0,
        language="en",
        progress=False,
    )

    async def one(trace: Trace) -> None:
        chunks = frames(loop, int(trace.offset_s * SAMPLE_RATE), plan.duration_s, CHUNK_MS)
        t0 = start + trace.index * plan.stagger_s
        await asyncio.sleep(max(0.0, t0 - time.monotonic()))
        tag = f"bench-{mode}-r{repeat}-n{n}-s{trace.index}"
        if mode == "raw":
            assert bare is not None
            coro = bare.raw_session(trace, chunks, t0, tag)
        elif mode == "engine":
            assert bare is not None
            coro = bare.engine_session(trace, chunks, t0, tag)
        elif mode in VOXGATE_MODES:
            assert vox is not None
            coro = vox.session(trace, chunks, t0, session_plan)
        else:
            assert vllm_server is not None
            coro = vllm_server.session(trace, chunks, t0)
        try:
            await asyncio.wait_for(coro, plan.duration_s + plan.session_timeout_s)
        except TimeoutError:
            trace.error = "timeout"
        except Exception as exc:  # a failed session is a result, not a crash of the bench
            trace.error = trace.error or f"{type(exc).__name__}: {str(exc)[:200]}"

    await asyncio.gather(*(one(t) for t in traces))
    wall = time.monotonic() - start
    cpu1 = cpu_seconds()
    cpu = {k: v - cpu0.get(k, 0.0) for k, v in cpu1.items() if k != "other"}
    in_process = mode in ("raw", "engine")
    steps_per_s = (bare.steps() - steps0) / wall if bare is not None and in_process else None
    if bare is not None and in_process:
        for _ in range(50):  # every request gone from the engine before the next level
            if bare.unfinished() == 0:
                break
            await asyncio.sleep(0.1)
    return summarize_level(mode, n, repeat, traces, plan.duration_s, plan.thresholds, wall, steps_per_s, cpu)


def f(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def level_line(r: LevelResult) -> str:
    return (
        f"  {r.mode:<7} N={r.n:<3} {'HELD' if r.held else 'lost'} ({r.sessions_kept_up}/{r.n})  "
        f"lag p50/p95 {f(r.lag_p50_s, '.2f')}/{f(r.lag_p95_s, '.2f')} s  final max {r.final_max_s:.2f} s  "
        f"wall/audio {f(r.wall_over_audio_max, '.3f')}  slip {r.slip_max_s:.2f} s  "
        f"gap p50/p95 {f(r.gap_p50_ms, '.0f')}/{f(r.gap_p95_ms, '.0f')} ms"
        + (
            f" (tokens {f(r.token_gap_p50_ms, '.0f')}/{f(r.token_gap_p95_ms, '.0f')})"
            if r.token_gap_p95_ms is not None
            else ""
        )
        + (f"  {r.engine_steps_per_s} steps/s" if r.engine_steps_per_s is not None else "")
        + (f"  errors: {r.errors}" if r.errors else "")
        + f"  load {r.load_avg_1m:.1f}"
        + "  cpu "
        + " ".join(f"{k} {v:.2f}" for k, v in r.cpu_cores.items() if v >= 0.005)
        + "  mc/stream "
        + " ".join(f"{k} {r.cpu_mc_per_stream[k]:g}" for k, v in r.cpu_cores.items() if v >= 0.005)
        + ("" if r.held else "  slip at " + ",".join(f"{s.slip_max_at_s:g}" for s in r.sessions) + " s")
    )


async def sweep(args: argparse.Namespace, model: str) -> dict[str, Any]:
    loop = load_loop()
    levels = [n for n in args.levels if n <= args.max_n]
    max_n = max(levels)
    modes: list[str] = args.modes
    options = {"max_model_len": args.max_model_len, "max_num_seqs": max_n, **args.engine_options}
    plan = Plan(
        duration_s=args.duration,
        stagger_s=args.stagger_s,
        session_timeout_s=args.session_timeout_s,
        thresholds=Thresholds(args.threshold_lag_s, args.threshold_final_s, args.threshold_slip_s),
    )
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    bare = Bare(model, options, max_n) if {"raw", "engine"} & set(modes) else None
    voxes = {
        mode: Voxgate(
            model,
            max_n,
            args.max_model_len,
            {**args.engine_options, **extra},
            Path(tempfile.gettempdir()) / f"voxgate-bench-serve-{mode}-{stamp}.log",
            flags,
        )
        for mode, (extra, flags) in VOXGATE_MODES.items()
        if mode in modes
    }
    vllm_server = (
        VllmRealtime(model, max_n, args.max_model_len, Path(tempfile.gettempdir()) / f"voxgate-bench-vllm-{stamp}.log")
        if "vllm" in modes
        else None
    )
    t_begin = time.monotonic()
    results: list[LevelResult] = []
    try:
        t = time.monotonic()
        for vox in voxes.values():  # all start at once (each takes 30-60 s here)
            print(f"starting voxgate serve ({' '.join(vox.server.cmd[1:])}) ...", flush=True)
            vox.server.launch()
        if vllm_server is not None:
            print(f"starting vLLM's realtime server ({' '.join(vllm_server.cmd[1:])}) ...", flush=True)
            vllm_server.launch()
        if bare is not None:
            print("starting the in-process engine (VoxtralEngine / AsyncLLM) ...", flush=True)
            await bare.start()
        for vox in voxes.values():
            await vox.wait_ready()
        if vllm_server is not None:
            await vllm_server.wait_ready()
        print(f"  engines ready in {time.monotonic() - t:.0f} s", flush=True)
        for repeat in range(1, args.repeats + 1):
            live = list(modes)
            for n in levels:
                if not live:
                    break
                print(f"repeat {repeat}/{args.repeats}, N={n}: {', '.join(live)}", flush=True)
                for mode in list(live):
                    for attempt in range(1 + args.retries):
                        r = await run_level(mode, n, repeat, bare, voxes, vllm_server, loop, plan)
                        r.attempt = attempt + 1
                        results.append(r)
                        print(level_line(r), flush=True)
                        await asyncio.sleep(args.settle_s)
                        if r.held:
                            break
                    else:
                        live.remove(mode)
    finally:
        for vox in voxes.values():
            await vox.stop()
        if vllm_server is not None:
            await vllm_server.stop()
        if bare is not None:
            await bare.stop()
    runtime = time.monotonic() - t_begin

    summary: list[dict[str, Any]] = []
    for repeat in range(1, args.repeats + 1):
        held = {
            m: max((r.n for r in results if r.repeat == repeat and r.mode == m and r.held), default=0) for m in modes
        }
        row: dict[str, Any] = {"repeat": repeat, "max_sessions_held": held}
        for base in ("engine", "raw", "vllm", *(m for m in VOXGATE_MODES if m != "voxgate")):
            if "voxgate" in held and base in held and held[base]:
                row[f"ratio_voxgate_over_{base}"] = round(held["voxgate"] / held[base], 3)
        summary.append(row)
    import vllm

    return {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "machine": describe(vllm=str(vllm.__version__), gpu=None),
        "model": model,
        "engine_options": options,
        "levels": levels,
        "modes": modes,
        "duration_s": args.duration,
        "stagger_s": args.stagger_s,
        "chunk_ms": CHUNK_MS,
        "thresholds": asdict(plan.thresholds),
        "runtime_s": round(runtime, 1),
        "summary": summary,
        "levels_run": [asdict(r) for r in results],
    }


def print_table(report: dict[str, Any]) -> None:
    modes: list[str] = report["modes"]
    th = report["thresholds"]
    print()
    print(
        f"max concurrent real-time sessions held (lag p95 <= {th['latency_p95_s']} s, "
        f"final <= {th['final_s']} s, slip <= {th['slip_s']} s), "
        f"{report['duration_s']:g} s of audio each:"
    )
    ratio_cols = [
        c
        for c in ("ratio_voxgate_over_engine", "ratio_voxgate_over_raw", "ratio_voxgate_over_vllm")
        if any(c in row for row in report["summary"])
    ]
    print("  repeat  " + "  ".join(f"{m:>8}" for m in modes) + "  " + "  ".join(f"{c[6:]:>20}" for c in ratio_cols))
    for row in report["summary"]:
        print(
            f"  {row['repeat']:>6}  "
            + "  ".join(f"{row['max_sessions_held'][m]:>8}" for m in modes)
            + "  "
            + "  ".join(f"{row[c]:>20.2f}" if c in row else f"{'-':>20}" for c in ratio_cols)
        )
    print()
    print("per level (lag = output arrival - its audio sent; includes the model's 480 ms delay):")
    print("  rep mode       N  held  lag p50  lag p95  final max  wall/audio  gap p50  gap p95  steps/s  load")
    for r in report["levels_run"]:
        steps = f"{'' if r['engine_steps_per_s'] is None else r['engine_steps_per_s']:>8}  {r['load_avg_1m']:>4.1f}"
        held = ("yes" if r["held"] else "NO") + ("*" if r["attempt"] > 1 else "")
        print(
            f"  {r['repeat']:>3} {r['mode']:<8} {r['n']:>3}  {held:<4} "
            f"{f(r['lag_p50_s'], '>7.2f')}  {f(r['lag_p95_s'], '>7.2f')}  {r['final_max_s']:>9.2f}  "
            f"{f(r['wall_over_audio_max'], '>10.3f')}  {f(r['gap_p50_ms'], '>7.0f')}  "
            f"{f(r['gap_p95_ms'], '>7.0f')} {steps}"
        )
    print("  (* a second attempt at a level; gap = between text outputs, ms; load = 1-min load average)")
    print(f"\nruntime {report['runtime_s']:.0f} s")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--model", help="Voxtral checkpoint dir (default: build the tiny random one in a temp dir)")
    p.add_argument("--duration", type=float, default=20.0, help="audio seconds per session (default 20)")
    p.add_argument("--max-n", type=int, default=32, help="highest concurrency tried (default 32)")
    p.add_argument(
        "--levels",
        type=lambda s: sorted({int(x) for x in s.split(",")}),
        default=list(DEFAULT_LEVELS),
        help="concurrency levels, comma-separated (default 1, 2, 3, 4, 6, 8, 10, 12, 14, 16, 20, ...)",
    )
    p.add_argument(
        "--modes",
        type=lambda s: [m for m in MODES if m in s.split(",")],
        default=list(MODES),
        help=f"comma-separated subset of {','.join(MODES)} (default all)",
    )
    p.add_argument("--repeats", type=int, default=1, help="sweeps in this run (default 1)")
    p.add_argument("--threshold-lag-s", type=float, default=1.0, help="max lag p95 per session (default 1.0)")
    p.add_argument(
        "--threshold-final-s", type=float, default=2.0, help="max end-of-audio -> last output per session (default 2.0)"
    )
    p.add_argument(
        "--threshold-slip-s", type=float, default=0.5, help="max lateness of a send against real time (default 0.5)"
    )
    p.add_argument("--stagger-s", type=float, default=0.25, help="start of session i is i x this (default 0.25)")
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument(
        "--engine-option",
        dest="engine_options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra voxtral engine option for both engines (JSON value); repeatable",
    )
    p.add_argument(
        "--retries",
        type=int,
        default=1,
        help="runs of a lost level again before its mode stops (default 1: lost twice = limit)",
    )
    p.add_argument("--settle-s", type=float, default=2.0, help="pause between levels (default 2)")
    p.add_argument("--session-timeout-s", type=float, default=60.0, help="grace past --duration per session")
    p.add_argument("--out", type=Path, help="JSON path (default bench/results/overhead-<date>.json)")
    args = p.parse_args(argv)
    # The rut watchdog restarts a request on a long blank run over VAD speech; the in-process modes have no
    # VAD, so it is off for every mode (the random tiny model's blank runs are noise anyway).
    from engine_sidecar.engines.voxtral.flags import parse_items

    try:
        args.engine_options = {"rut_blank_frames": 0, **parse_items(args.engine_options)}
    except ValueError as exc:
        p.error(str(exc))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="voxgate-bench-") as tmp:
        model = args.model
        if not model:
            from engine_sidecar.engines.voxtral.tiny_checkpoint import build_tiny_checkpoint

            model = str(build_tiny_checkpoint(Path(tmp) / "tiny", seed=0))
            print(f"tiny checkpoint: {model}", flush=True)
        report = asyncio.run(sweep(args, model))
    out = args.out or RESULTS_DIR / f"overhead-{dt.date.today().isoformat()}.json"
    if not args.out and out.exists():  # another run today: keep both
        out = out.with_name(f"{out.stem}-{dt.datetime.now():%H%M%S}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print_table(report)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
