"""Prometheus metrics, served over HTTP on --metrics-port (0: off).

Names follow Prometheus conventions (base units, _total counters). One process
registry: the service is one process per port.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import Counter, Gauge, Histogram, start_http_server

LATENCY_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)

ACTIVE_SESSIONS = Gauge("voxgate_active_sessions", "Sessions holding an engine slot (detached ones included)")
SESSIONS_STARTED = Counter("voxgate_sessions_started_total", "Sessions admitted")
SESSIONS_ENDED = Counter("voxgate_sessions_ended_total", "Sessions ended, by SessionEnded reason", ["reason"])
REJECTED = Counter("voxgate_errors_total", "Streams ended on an error status, by ErrorInfo reason", ["reason"])
AUDIO_SECONDS = Counter("voxgate_audio_seconds_total", "Audio processed by the engine")
REALTIME_FACTOR = Histogram(
    "voxgate_session_realtime_factor",
    "Session wall time / audio duration",
    buckets=(0.25, 0.5, 0.9, 1.0, 1.05, 1.1, 1.25, 1.5, 2.0, 4.0),
)
LAG = Histogram("voxgate_engine_lag_seconds", "How long audio waited for the engine", buckets=LATENCY_BUCKETS)
FIRST_RESULT = Histogram(
    "voxgate_time_to_first_result_seconds", "Session start to its first result", buckets=LATENCY_BUCKETS
)
FINAL_LATENCY = Histogram(
    "voxgate_final_latency_seconds", "End of speech (VAD) to the utterance's final result", buckets=LATENCY_BUCKETS
)
ENGINE_EVENTS = Counter(
    "voxgate_engine_events_total",
    "Engine events: rollover, reanchor, rut_recovery, freeze_recovery (engine side); "
    "engine_restarted, engine_reset (service-side seams)",
    ["kind"],
)
CAPACITY_SESSIONS = Gauge(
    "voxgate_capacity_sessions",
    "Sessions as each layer counts them at the last sidecar health check: service (held by "
    "the service), sidecar (engine slots handed out), engine (the engine's own count); equal "
    "once sessions end",
    ["layer"],
)
CAPACITY_MISMATCHES = Counter(
    "voxgate_capacity_mismatches_total",
    "Health checks at which service, sidecar and engine session counts stayed apart "
    "(a leaked slot); counted once until they agree again",
)
ENGINE_UP = Gauge("voxgate_engine_up", "Engine sidecars ready (1 while the one engine is; --engines N: up to N)")
ENGINE_READY = Gauge("voxgate_engine_ready", "1 while this engine sidecar is ready (by engine index)", ["engine"])
ENGINE_SESSIONS = Gauge("voxgate_engine_sessions", "Engine sessions this service has open on each engine", ["engine"])
SIDECAR_RESTARTS = Counter("voxgate_sidecar_restarts_total", "Engine sidecar restarts")
# What each engine reports at its health checks: one series per engine (its index in the pool; "0" alone).
ENGINE_KV_USAGE = Gauge(
    "voxgate_engine_kv_cache_usage_ratio", "Engine KV-cache usage (engines that report it)", ["engine"]
)
ENGINE_QUEUE = Gauge(
    "voxgate_engine_queue_depth", "Requests waiting in the engine (engines that report it)", ["engine"]
)
ENGINE_REANCHOR_ACTIVE = Gauge(
    "voxgate_engine_reanchor_active",
    "1: sessions re-anchor (unbounded, no seam); 0: they roll over (re-anchoring off, or "
    "a start-up guard failed: see the sidecar's reanchor_unavailable log line)",
    ["engine"],
)


def serve_metrics(port: int, host: str, active_sessions: Callable[[], int]) -> None:
    ACTIVE_SESSIONS.set_function(lambda: float(active_sessions()))
    if port:
        start_http_server(port, addr=host)


def engine_status(engine: str, counters: dict[str, int]) -> None:
    """One engine's reported counters, on its `engine` series (front ends of one engine share its core's)."""
    if "engine_kv_usage_pct" in counters:
        ENGINE_KV_USAGE.labels(engine).set(counters["engine_kv_usage_pct"] / 100)
    if "engine_waiting" in counters:
        ENGINE_QUEUE.labels(engine).set(counters["engine_waiting"])
    if "reanchor_active" in counters:
        ENGINE_REANCHOR_ACTIVE.labels(engine).set(counters["reanchor_active"])
