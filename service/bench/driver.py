"""Drive N desynchronized sessions through `voxgate.v1.Speech/StreamingRecognize` and measure them."""

from __future__ import annotations

import asyncio
import math
import os
import random
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio
import numpy as np

from voxgate_client.v1 import speech_pb2 as pb
from voxgate_client.v1 import speech_pb2_grpc

from .audio import SAMPLE_RATE, frames
from .procstats import ProcSampler
from .trace import SessionSummary, SessionTrace, Thresholds, pct, summarize

RAMP_S = 2.0  # default: session starts spread over this, each at a random phase within a frame
SESSIONS_PER_CONNECTION = 32  # default: one HTTP/2 connection per this many sessions
ENDED_STATUS_WAIT_S = 5.0  # how long a session whose write found the call ended waits for the server's status
# Each channel its own TCP connection, never a subchannel pooled with another channel to the same target:
# SO_REUSEPORT spreads connections, not streams, across `voxgate serve --workers`.
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]


@dataclass(frozen=True)
class Plan:
    duration_s: float
    frame_ms: int
    speed: float  # 1.0 = real time
    stagger_s: float  # session i starts i x this after the first (0: spread over RAMP_S)
    timeout_s: float  # grace past the audio before a session counts as hung
    thresholds: Thresholds
    ref_shift_ms: int  # see SessionTrace.ref_shift_ms
    language: str = "en-US"
    progress: bool = True
    sessions_per_connection: int = SESSIONS_PER_CONNECTION


@dataclass
class LevelResult:
    n: int
    attempt: int
    held: bool
    sessions_kept_up: int
    errors: dict[str, int]
    first_result_p50_s: float | None
    first_result_max_s: float | None
    latency_p50_s: float | None
    latency_p95_s: float | None
    latency_p99_s: float | None
    latency_max_s: float | None
    final_p50_s: float | None
    final_p99_s: float | None
    final_max_s: float | None
    slip_max_s: float
    wall_over_audio_max: float | None
    results: int
    wall_s: float
    load_avg_1m_before: float
    load_avg_1m_after: float
    processes: dict[str, dict[str, float]]  # role -> cpu_cores_mean/max, rss_mib_max
    cpu_cores_per_session: dict[str, float]  # service+sidecar(+engine) cores / N
    sessions: list[SessionSummary]
    latencies: list[float] = field(default_factory=list)  # every interim latency (s), for the CDF
    lag_series: list[tuple[float, float]] = field(default_factory=list)  # (s since level start, latency s)
    proc_series: list[tuple[float, dict[str, tuple[float, float]]]] = field(default_factory=list)


async def send_paced(
    trace: SessionTrace,
    chunks: list[bytes],
    t0: float,
    period_s: float,
    send: Callable[[bytes], Awaitable[None]],
    stop: Callable[[], bool] = lambda: False,
) -> None:
    """Send chunk i at t0 + i x period_s (or as soon as the previous send returned, when late), noting in
    `trace` when each was due and sent; stops early once `stop()` says so."""
    for i, chunk in enumerate(chunks):
        due = t0 + i * period_s
        if (wait := due - time.monotonic()) > 0:
            await asyncio.sleep(wait)
        if stop():
            return
        trace.scheduled.append(due)
        trace.sent.append(time.monotonic())
        await send(chunk)


async def run_session(
    channel: grpc.aio.Channel, trace: SessionTrace, chunks: list[bytes], t0: float, plan: Plan
) -> None:
    stub = speech_pb2_grpc.SpeechStub(channel)
    call = stub.StreamingRecognize()
    await call.write(
        pb.StreamingRecognizeRequest(
            config=pb.StreamingConfig(
                encoding=pb.AUDIO_ENCODING_LINEAR16,
                sample_rate_hz=SAMPLE_RATE,
                audio_channel_count=1,
                language_code=plan.language,
                interim_results=True,
            )
        )
    )

    async def read() -> None:
        while (resp := await call.read()) is not grpc.aio.EOF:
            now = time.monotonic()
            kind = resp.WhichOneof("response")
            if kind == "result":
                r = resp.result
                trace.results.append((now, r.end_offset.seconds * 1000 + r.end_offset.nanos // 1_000_000, r.is_final))
                if r.is_final:
                    trace.last_final = now
            elif kind == "started":
                trace.started = now
            elif kind == "ended":
                trace.ended = now

    async def write(chunk: bytes) -> None:
        await call.write(pb.StreamingRecognizeRequest(audio=chunk))

    reader = asyncio.create_task(read())
    try:
        # Stops when the server ended the call: its status says why.
        await send_paced(trace, chunks, t0, plan.frame_ms / 1000 / plan.speed, write, reader.done)
        if not reader.done():
            trace.end_sent = time.monotonic()
            await call.done_writing()
        await reader
    except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as exc:
        trace.error = _describe(exc)
        if isinstance(exc, asyncio.InvalidStateError):
            # A write found the call already ended by the server: the reader is about to get its status.
            await asyncio.wait({reader}, timeout=ENDED_STATUS_WAIT_S)
    finally:
        if not reader.done():
            call.cancel()
            reader.cancel()
        try:
            await reader
        except BaseException as exc:  # the reader's failure is the session's error when it has none yet
            if not trace.error and not isinstance(exc, asyncio.CancelledError):
                trace.error = _describe(exc)
    if reader.done() and not reader.cancelled() and (failure := reader.exception()) is not None:
        trace.error = _describe(failure)  # the server's status beats a failed write


def _describe(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {(exc.details() or '')[:120]}"
    return f"{type(exc).__name__}: {str(exc)[:120]}"


def _print(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def _progress(n: int, traces: list[SessionTrace], start: float, total_s: float) -> None:
    while True:
        await asyncio.sleep(2.0)
        live = sum(1 for t in traces if t.sent and not t.ended and not t.error)
        res = sum(len(t.results) for t in traces)
        errs = sum(1 for t in traces if t.error)
        slip = max((t.sent[-1] - t.scheduled[-1] for t in traces if t.sent), default=0.0)
        _print(
            f"    N={n}: {time.monotonic() - start:5.1f}/{total_s:.0f} s  live {live}  results {res}  "
            f"errors {errs}  send slip {slip * 1000:.0f} ms  load {os.getloadavg()[0]:.1f}"
        )


async def server_engine(target: str) -> str:
    """The engine a running server says it runs (GetCapabilities), e.g. "sphinx"; "" if it does not say."""
    async with grpc.aio.insecure_channel(target) as channel:
        caps = await speech_pb2_grpc.SpeechStub(channel).GetCapabilities(pb.GetCapabilitiesRequest(), timeout=10)
    return caps.engine.name


async def pick_language(target: str, wanted: str | None) -> str:
    """`wanted`, or the server's first English language code (en-US for sphinx/fake, en for voxtral)."""
    if wanted:
        return wanted
    async with grpc.aio.insecure_channel(target) as channel:
        caps = await speech_pb2_grpc.SpeechStub(channel).GetCapabilities(pb.GetCapabilitiesRequest(), timeout=10)
    langs = list(caps.languages)
    return next((lang for lang in langs if lang.lower().startswith("en")), langs[0] if langs else "en-US")


async def run_level(
    target: str, n: int, attempt: int, loop: np.ndarray, plan: Plan, server_pid: int | None
) -> LevelResult:
    stagger = plan.stagger_s if plan.stagger_s > 0 else RAMP_S / max(n, 1)
    rng = random.Random(n)  # each session's phase within a frame: desynchronized, reproducible
    phase = [rng.uniform(0, plan.frame_ms / 1000) for _ in range(n)]
    traces = [
        SessionTrace(
            index=i,
            offset_s=round(i * len(loop) / n / SAMPLE_RATE, 3),
            frame_ms=plan.frame_ms,
            ref_shift_ms=plan.ref_shift_ms,
        )
        for i in range(n)
    ]
    chunks = [frames(loop, int(t.offset_s * SAMPLE_RATE), plan.duration_s, plan.frame_ms) for t in traces]
    per = plan.sessions_per_connection
    channels = [grpc.aio.insecure_channel(target, OWN_CONNECTION) for _ in range(math.ceil(n / per))]
    for ch in channels:
        await ch.channel_ready()
    load0 = os.getloadavg()[0]
    sampler = ProcSampler(server_pid)
    sampler.start()
    start = time.monotonic() + 0.3
    audio_wall = plan.duration_s / plan.speed
    ticker = asyncio.create_task(_progress(n, traces, start, audio_wall + n * stagger)) if plan.progress else None

    async def one(i: int) -> None:
        t0 = start + i * stagger + phase[i]
        await asyncio.sleep(max(0.0, t0 - time.monotonic()))
        try:
            await asyncio.wait_for(
                run_session(channels[i // per], traces[i], chunks[i], t0, plan), audio_wall + plan.timeout_s
            )
        except TimeoutError:
            traces[i].error = "timeout"
        except Exception as exc:  # a failed session is a result, not a crash of the bench
            traces[i].error = f"{type(exc).__name__}: {str(exc)[:160]}"

    try:
        await asyncio.gather(*(one(i) for i in range(n)))
    finally:
        if ticker is not None:
            ticker.cancel()
        for ch in channels:
            await ch.close()
    wall = time.monotonic() - start
    procs = await sampler.stop()
    return _level(n, attempt, traces, plan, wall, load0, procs, sampler.series, start)


def _level(
    n: int,
    attempt: int,
    traces: list[SessionTrace],
    plan: Plan,
    wall: float,
    load0: float,
    procs: dict[str, dict[str, float]],
    proc_series: list[Any],
    start: float,
) -> LevelResult:
    sessions = [summarize(t, plan.duration_s, plan.thresholds) for t in traces]
    lats: list[float] = []
    series: list[tuple[float, float]] = []
    for t in traces:
        for arrival, lat in t.latencies():
            lats.append(lat)
            series.append((round(arrival - start, 3), round(lat, 4)))
    series.sort()
    if len(series) > 2000:  # plots only: keep the JSON small
        series = series[:: math.ceil(len(series) / 2000)]
    firsts = [s.first_result_s for s in sessions if s.first_result_s is not None]
    finals = [s.final_s for s in sessions if s.final_s is not None]
    walls = [s.wall_over_audio for s in sessions if s.wall_over_audio is not None]
    errors: dict[str, int] = {}
    for s in sessions:
        if s.error:
            errors[s.error] = errors.get(s.error, 0) + 1
    kept = sum(s.keeps_up for s in sessions)
    server_cores = sum(v["cpu_cores_mean"] for k, v in procs.items() if k in ("service", "sidecar", "engine"))
    per_session = {k: round(v["cpu_cores_mean"] / n, 5) for k, v in procs.items()}
    per_session["server"] = round(server_cores / n, 5)
    return LevelResult(
        n=n,
        attempt=attempt,
        held=kept == n,
        sessions_kept_up=kept,
        errors=errors,
        first_result_p50_s=pct(firsts, 50),
        first_result_max_s=round(max(firsts), 4) if firsts else None,
        latency_p50_s=pct(lats, 50),
        latency_p95_s=pct(lats, 95),
        latency_p99_s=pct(lats, 99),
        latency_max_s=round(max(lats), 4) if lats else None,
        final_p50_s=pct(finals, 50),
        final_p99_s=pct(finals, 99),
        final_max_s=round(max(finals), 4) if finals else None,
        slip_max_s=max(s.slip_max_s for s in sessions),
        wall_over_audio_max=max(walls) if walls else None,
        results=sum(s.results for s in sessions),
        wall_s=round(wall, 2),
        load_avg_1m_before=round(load0, 2),
        load_avg_1m_after=round(os.getloadavg()[0], 2),
        processes=procs,
        cpu_cores_per_session=per_session,
        sessions=sessions,
        latencies=sorted(round(x, 4) for x in lats)[:: max(1, math.ceil(len(lats) / 5000))],
        lag_series=series,
        proc_series=proc_series,
    )
