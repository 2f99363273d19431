"""The engine's own scheduler view (running / waiting / parked requests, KV usage), as vLLM reports it.

A custom vLLM stat logger keeps the latest SchedulerStats of every engine step.
Only our logger is installed (vLLM's periodic log lines and Prometheus stay off).
Parked streaming sessions (WAITING_FOR_STREAMING_REQ) count as "skipped waiting".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
    """A vLLM StatLoggerFactory writing into snapshot (vLLM imported here, not at module import)."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class SnapshotLogger(StatLoggerBase):
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            self._snap = snapshot

        def record(self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None,
                   engine_idx: int = 0) -> None:
            if scheduler_stats is None:
                return
            s = self._snap
            s.running = scheduler_stats.num_running_reqs
            s.waiting = scheduler_stats.num_waiting_reqs
            s.parked = scheduler_stats.num_skipped_waiting_reqs
            s.kv_cache_usage = scheduler_stats.kv_cache_usage
            s.steps += 1

        def log_engine_initialized(self) -> None:
            return None

    return SnapshotLogger
