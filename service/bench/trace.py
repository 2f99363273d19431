"""What one session saw, and its summary. Every time is time.monotonic()."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass
class SessionTrace:
    index: int
    offset_s: float  # where in the audio loop it starts
    frame_ms: int
    ref_shift_ms: int = 0  # subtracted from a result's end offset to get the audio that produced it
    scheduled: list[float] = field(default_factory=list)  # when frame i was due
    sent: list[float] = field(default_factory=list)  # when frame i was sent
    results: list[tuple[float, int, bool]] = field(default_factory=list)  # (arrival, end offset ms, is_final)
    started: float = 0.0  # SessionStarted arrived
    end_sent: float = 0.0  # half-close sent
    ended: float = 0.0  # SessionEnded arrived
    last_final: float = 0.0  # the last final result arrived
    error: str = ""

    def latencies(self) -> list[tuple[float, float]]:
        """(arrival, latency s) per interim result: arrival minus when the frame holding its audio was sent."""
        out: list[tuple[float, float]] = []
        if not self.sent:
            return out
        for arrival, end_ms, final in self.results:
            if final:
                continue
            ref = max(0, end_ms - self.ref_shift_ms)
            j = min(max(0, math.ceil(ref / self.frame_ms) - 1), len(self.sent) - 1)
            out.append((arrival, arrival - self.sent[j]))
        return out


def pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 4) if values else None


@dataclass
class SessionSummary:
    index: int
    offset_s: float
    results: int
    first_result_s: float | None  # first audio sent -> first result
    latency_p50_s: float | None
    latency_p95_s: float | None
    latency_p99_s: float | None
    latency_max_s: float | None
    final_s: float | None  # end of audio (half-close) -> the last final result (or SessionEnded when none)
    ended_s: float | None  # end of audio -> SessionEnded
    slip_max_s: float  # the most a frame was sent behind its real-time schedule
    slip_max_at_s: float  # when that frame was due, from the session's first (simultaneous in all: a stall)
    wall_over_audio: float | None  # (SessionEnded - first frame) / audio duration
    keeps_up: bool
    error: str


@dataclass(frozen=True)
class Thresholds:
    latency_p95_s: float
    final_s: float
    slip_s: float


def summarize(t: SessionTrace, audio_s: float, th: Thresholds) -> SessionSummary:
    lats = [lat for _, lat in t.latencies()]
    first = t.results[0][0] - t.sent[0] if t.results and t.sent else None
    end_ref = t.last_final or t.ended
    final = end_ref - t.end_sent if end_ref and t.end_sent else None
    ended = t.ended - t.end_sent if t.ended and t.end_sent else None
    slips = [s - d for s, d in zip(t.sent, t.scheduled, strict=True)]
    slip = max(slips, default=0.0)
    slip_at = t.scheduled[slips.index(slip)] - t.scheduled[0] if slips else 0.0
    wall = (t.ended - t.sent[0]) / audio_s if t.ended and t.sent else None
    error = t.error or ("" if t.results else "no result")
    p95 = pct(lats, 95)
    ok = (
        not error
        and p95 is not None
        and p95 <= th.latency_p95_s
        and final is not None
        and final <= th.final_s
        and slip <= th.slip_s
    )
    return SessionSummary(
        index=t.index,
        offset_s=t.offset_s,
        results=len(t.results),
        first_result_s=None if first is None else round(first, 4),
        latency_p50_s=pct(lats, 50),
        latency_p95_s=p95,
        latency_p99_s=pct(lats, 99),
        latency_max_s=round(max(lats), 4) if lats else None,
        final_s=None if final is None else round(final, 4),
        ended_s=None if ended is None else round(ended, 4),
        slip_max_s=round(slip, 4),
        slip_max_at_s=round(slip_at, 2),
        wall_over_audio=None if wall is None else round(wall, 4),
        keeps_up=ok,
        error=error,
    )
