"""The session's replay buffer, freeze watch and timers, on an injected clock."""

from __future__ import annotations

import pytest

from engine_sidecar.engine import Closed, Delta, Diagnostic, Flushed
from service.session.freeze import FreezeWatch, Frozen
from service.session.intake import Chunk
from service.session.replay import ReplayBuffer
from service.session.timers import Due, SessionTimers


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


def chunk(start_ms: int, speech: bool = True, ms: int = 80) -> Chunk:
    return Chunk(b"\0" * (32 * ms), speech, start_ms, received_at=0.0)


def test_replay_keeps_what_the_engine_has_not_covered() -> None:
    replay = ReplayBuffer(max_ms=10_000)
    for start in range(0, 800, 80):
        replay.written(chunk(start))
    replay.covered(240)  # text up to 240 ms: chunks ending at or before it go
    assert [c.start_ms for c in replay.snapshot()] == list(range(240, 800, 80))
    assert replay.start_ms(default_ms=999) == 240 and replay.duration_ms() == 560
    replay.covered(10_000)
    assert replay.snapshot() == [] and replay.start_ms(default_ms=800) == 800


def test_replay_drops_the_oldest_audio_beyond_its_bound() -> None:
    replay = ReplayBuffer(max_ms=400)
    for start in range(0, 1600, 80):
        replay.written(chunk(start))
    kept = replay.snapshot()
    assert kept[-1].end_ms - kept[0].start_ms <= 400 and kept[-1].start_ms == 1520
    tiny = ReplayBuffer(max_ms=0)
    tiny.written(chunk(0))  # one chunk longer than the bound: dropped, not an error
    assert tiny.snapshot() == []


def test_the_freeze_watch_fires_once_speech_goes_unanswered() -> None:
    clock = FakeClock()
    watch = FreezeWatch(clock, timeout_s=15)
    watch.sent(chunk(0, speech=False))
    clock.now += 60
    watch.check()  # silence sent: nothing to answer
    watch.sent(chunk(80))
    clock.now += 10
    watch.answered(Delta("hi", 0, 160))  # covers all the speech sent: disarmed
    assert watch.unanswered_since is None
    watch.sent(chunk(160))
    watch.sent(chunk(240))
    clock.now += 10
    watch.answered(Flushed(1, 200))  # progress, but speech up to 320 ms is still out: the clock restarts
    assert watch.unanswered_since == clock.now
    restarted = clock.now
    clock.now += 10
    watch.answered(Diagnostic("reanchor", "x", 0))  # covers no audio: the clock runs on
    assert watch.unanswered_since == restarted
    watch.sent(chunk(320))
    clock.now += 5.5
    with pytest.raises(Frozen, match="no engine output for 15s"):
        watch.check()
    watch.check()  # fired once; it re-arms with the next speech sent
    watch.sent(chunk(400))
    watch.answered(Closed(480))
    assert watch.unanswered_since is None


def test_idle_warns_once_at_half_the_timeout_then_times_out() -> None:
    clock = FakeClock()
    timers = SessionTimers(clock, idle_timeout_s=10, resume_window_s=30, flow_interval_s=None)
    clock.now += 4.9
    assert timers.tick(holding_client_back=False) == Due()
    clock.now += 0.2
    assert timers.tick(holding_client_back=False).idle_warning_after_s == pytest.approx(5.1)
    clock.now += 1
    assert timers.tick(holding_client_back=False) == Due(), "warned once per idle spell"
    timers.activity()  # a keep-alive
    clock.now += 9
    assert timers.tick(holding_client_back=False).idle_warning_after_s == pytest.approx(9), "warned again"
    clock.now += 1.1
    assert timers.tick(holding_client_back=False) == Due(idle_timeout=True)


def test_a_client_held_back_by_flow_control_is_not_idle() -> None:
    clock = FakeClock()
    timers = SessionTimers(clock, idle_timeout_s=10, resume_window_s=30, flow_interval_s=None)
    for _ in range(30):
        clock.now += 1
        assert timers.tick(holding_client_back=True) == Due()
    clock.now += 10.5
    assert timers.tick(holding_client_back=False).idle_timeout


def test_while_detached_only_the_resume_window_runs() -> None:
    clock = FakeClock()
    timers = SessionTimers(clock, idle_timeout_s=10, resume_window_s=30, flow_interval_s=1)
    assert timers.tick(holding_client_back=False) == Due(flow_report=True)
    timers.detached()
    clock.now += 29
    assert timers.tick(holding_client_back=False) == Due(), "no idle timeout, no FlowStatus while detached"
    timers.attached()  # resumed in time: the idle clock starts afresh
    clock.now += 1
    assert timers.tick(holding_client_back=False) == Due(flow_report=True)
    timers.detached()
    clock.now += 30.5
    assert timers.tick(holding_client_back=False) == Due(resume_window_passed=True)


def test_flow_reports_come_every_interval() -> None:
    clock = FakeClock()
    timers = SessionTimers(clock, idle_timeout_s=100, resume_window_s=30, flow_interval_s=0.5)
    due = []
    for _ in range(20):  # 2 s in 0.1 s ticks
        due.append(timers.tick(holding_client_back=False).flow_report)
        clock.now += 0.1
    assert sum(due) == 4 and due[0]
