"""A session's latency and volume metrics (Prometheus) and its end-of-session trace attributes."""

from __future__ import annotations

from .. import metrics, tracing
from ..clock import Clock
from ..events import EndReason


class SessionStats:
    def __init__(self, session_id: str, clock: Clock) -> None:
        self._session_id = session_id
        self._clock = clock
        self._started_at = clock.monotonic()
        self._first_result_seen = False
        self._speech_ended_at: float | None = None

    def speech_ended(self) -> None:
        self._speech_ended_at = self._clock.monotonic()

    def result(self, final: bool) -> None:
        now = self._clock.monotonic()
        if not self._first_result_seen:
            self._first_result_seen = True
            metrics.FIRST_RESULT.observe(now - self._started_at)
        if final and self._speech_ended_at is not None:
            metrics.FINAL_LATENCY.observe(now - self._speech_ended_at)
            self._speech_ended_at = None

    def ended(self, reason: EndReason, audio_ms: int, engine_restarts: int, freeze_recoveries: int) -> None:
        tracing.session_ended(
            self._session_id,
            {
                "voxgate.end_reason": reason.value,
                "voxgate.audio_seconds": audio_ms / 1000,
                "voxgate.engine_restarts": engine_restarts,
                "voxgate.freeze_recoveries": freeze_recoveries,
            },
        )
        metrics.SESSIONS_ENDED.labels(reason.value).inc()
        metrics.AUDIO_SECONDS.inc(audio_ms / 1000)
        if audio_ms:
            metrics.REALTIME_FACTOR.observe((self._clock.monotonic() - self._started_at) / (audio_ms / 1000))
