"""The capacity audit: a difference that stays is a mismatch, counted once; one that moves is traffic."""

from __future__ import annotations

from service.capacity import CapacityAudit, CapacityCounts
from tests.unit.test_session_parts import FakeClock


def test_a_difference_that_stays_a_health_interval_is_one_mismatch() -> None:
    clock = FakeClock()
    audit = CapacityAudit(clock, settle_s=2.0)
    leaked = CapacityCounts(service=0, sidecar=1, engine=0)
    audit.check(leaked)
    clock.now += 1.0
    audit.check(leaked)
    assert audit.mismatches == 0, "not yet a health interval"
    clock.now += 1.0
    audit.check(leaked)
    clock.now += 2.0
    audit.check(leaked)
    assert audit.mismatches == 1, "counted once per episode"
    audit.check(CapacityCounts(0, 0, 0))
    audit.check(leaked)
    clock.now += 2.0
    audit.check(leaked)
    assert audit.mismatches == 2


def test_counts_that_move_are_not_a_mismatch() -> None:
    clock = FakeClock()
    audit = CapacityAudit(clock, settle_s=2.0)
    for i in range(10):  # sessions come and go: the layers are a moment apart, never the same way twice
        audit.check(CapacityCounts(service=i + 1, sidecar=i, engine=i))
        clock.now += 2.0
    assert audit.mismatches == 0
