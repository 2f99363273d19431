"""One truth about capacity: the sessions the service holds, the sidecar's slots and the engine's own count.

They count the same sessions at different moments (a session opens on the service first and
closes there first), so while sessions come and go they may differ for a moment; once sessions
end they are equal. The same difference seen at health checks `settle_s` or more apart (nothing
moved, yet they disagree) is a leak: it is logged and counted once per episode (until the three
agree again).
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from . import metrics
from .clock import Clock

log = structlog.get_logger("capacity")


@dataclass(frozen=True)
class CapacityCounts:
    service: int  # sessions the service holds: starting, live, detached
    sidecar: int  # engine slots the sidecar has handed out
    engine: int  # sessions the engine reports open (its counters' sessions_active)
    opening: int = 0  # of the sidecar's slots, those whose engine session is still being opened

    @property
    def agree(self) -> bool:
        # A session being opened holds its slot before the engine counts it (building a PocketSphinx decoder
        # takes seconds on a loaded box): that is no leak.
        return self.service == self.sidecar and self.sidecar - self.opening == self.engine


class CapacityAudit:
    """Compares the counts at each health check; see the module docstring."""

    def __init__(self, clock: Clock, settle_s: float) -> None:
        self._clock = clock
        self._settle_s = settle_s
        self.last: CapacityCounts | None = None
        self.mismatches = 0
        self._apart_since = 0.0  # when `last` (a disagreement) was first seen
        self._reported = False  # this episode is counted already

    def check(self, counts: CapacityCounts) -> None:
        now = self._clock.monotonic()
        if counts != self.last:
            self._apart_since = now
        self.last = counts
        for layer, value in (("service", counts.service), ("sidecar", counts.sidecar), ("engine", counts.engine)):
            metrics.CAPACITY_SESSIONS.labels(layer).set(value)
        if counts.agree:
            if self._reported:
                log.info("capacity_agrees_again", service=counts.service, sidecar=counts.sidecar, engine=counts.engine)
            self._reported = False
            return
        if now - self._apart_since >= self._settle_s and not self._reported:
            self._reported = True
            self.mismatches += 1
            metrics.CAPACITY_MISMATCHES.inc()
            log.warning("capacity_mismatch", service=counts.service, sidecar=counts.sidecar, engine=counts.engine)
