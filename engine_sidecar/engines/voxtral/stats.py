"""The engine's own scheduler view (running / waiting / parked requests, KV usage), as vLLM reports it.

A custom vLLM stat logger keeps the latest SchedulerStats of every engine step.
It replaces vLLM's Prometheus logger (never served by the sidecar). vLLM's periodic throughput log line is
not added (the engine options set disable_log_stats, so vLLM builds no default loggers).
Parked streaming sessions (WAITING_FOR_STREAMING_REQ) count as "skipped waiting".

A custom logger makes vLLM keep every statistic (`AsyncLLM.log_stats` is forced on): per-request stats in
the output processor and an `IterationStats` filled per output, in the front end, for loggers that read
only the scheduler's numbers here. `scheduler_stats_only` turns the front end's share off; the engine core
goes on sending its scheduler stats with every step.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import structlog

log = structlog.get_logger("voxtral")


@dataclass
class SchedulerSnapshot:
    running: int = 0
    waiting: int = 0
    parked: int = 0
    kv_cache_usage: float = 0.0
    steps: int = 0

    @property
    def requests(self) -> int:
        return self.running + self.waiting + self.parked


def stat_logger_factory(snapshot: SchedulerSnapshot) -> Any:
    """A vLLM StatLoggerFactory writing into snapshot (vLLM imported here, not at module import).

    It is a PrometheusStatLogger in type only: vLLM adds its own Prometheus logger unless one is given
    (StatLoggerManager), and that one records dozens of series per engine step, per request, into a
    registry the sidecar never serves (about a twelfth of a front end's GIL time, profiled: docs/benchmarks.md).
    Being one, this logger stands in for it and builds none of its metrics."""
    from vllm.v1.metrics.loggers import PrometheusStatLogger

    class SnapshotLogger(PrometheusStatLogger):
        def __init__(self, vllm_config: Any, engine_indexes: list[int] | None = None) -> None:
            self._snap = snapshot  # no super().__init__: that builds the Prometheus metrics

        def record(
            self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None, engine_idx: int = 0
        ) -> None:
            if scheduler_stats is None:
                return
            s = self._snap
            s.running = scheduler_stats.num_running_reqs
            s.waiting = scheduler_stats.num_waiting_reqs
            s.parked = scheduler_stats.num_skipped_waiting_reqs
            s.kv_cache_usage = scheduler_stats.kv_cache_usage
            s.steps += 1

        def record_sleep_state(self, awake: int = 1, level: int = 0) -> None:
            return None

        def record_admission_rejection(self, reason: str) -> None:
            return None

        def log(self) -> None:
            return None

        def log_engine_initialized(self) -> None:
            return None

    return SnapshotLogger


def scheduler_stats_only(llm: Any) -> bool:
    """Stop the front end's per-request and per-output statistics (no logger of ours reads them). Called
    right after AsyncLLM is built, before any request: its output loop, started in the constructor, read
    `log_stats` then, so it is restarted. False (and vLLM left as it was) where vLLM's internals moved."""
    processor: Any = getattr(llm, "output_processor", None)
    handler = getattr(llm, "output_handler", None)
    if not (
        hasattr(processor, "log_stats")
        and hasattr(llm, "_run_output_handler")
        and (handler is None or isinstance(handler, asyncio.Task))
        and not processor.request_states
    ):
        log.warning("request_stats_kept", reason="vLLM's output processor or output loop is not as expected")
        return False
    processor.log_stats = False
    llm.log_stats = False
    if handler is not None:
        handler.cancel()  # it is waiting for the engine core's first output: nothing is in flight yet
        llm.output_handler = None
        llm._run_output_handler()
    return True
