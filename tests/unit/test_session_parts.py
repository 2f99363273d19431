"""The session's replay buffer, freeze watch and timers, on an injected clock."""

from __future__ import annotations

import pytest

from engine_api.outputs import Closed, Delta, Diagnostic, Flushed, Progress
from service.session.freeze import SLACK_MS, FreezeWatch, Frozen
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


def test_the_freeze_watch_fires_once_audio_goes_untaken() -> None:
    clock = FakeClock()
    watch = FreezeWatch(clock, timeout_s=15)
    for start in range(0, SLACK_MS, 100):  # up to SLACK_MS unreported: the engine may hold it (not owed)
        watch.sent(chunk(start, ms=100))
    assert watch.unanswered_since is None
    watch.sent(chunk(SLACK_MS, ms=100))
    armed = clock.now
    assert watch.unanswered_since == armed
    for start in range(SLACK_MS + 100, 2 * SLACK_MS, 100):
        watch.sent(chunk(start, ms=100))
    clock.now += 10
    watch.answered(Diagnostic("reanchor", "x", 0))  # covers no audio: the clock runs on
    assert watch.unanswered_since == armed
    watch.answered(Delta("hi", 0, 160))  # progress, but audio is still owed beyond the slack: the clock restarts
    assert watch.unanswered_since == clock.now
    clock.now += 10
    watch.answered(Progress(SLACK_MS))  # taken in, nothing said: caught up all the same
    assert watch.unanswered_since is None
    for start in range(2 * SLACK_MS, 3 * SLACK_MS, 100):
        watch.sent(chunk(start, ms=100))
    clock.now += 15.5
    with pytest.raises(Frozen, match="not taken in by the engine for 15s"):
        watch.check()
    watch.check()  # fired once; it re-arms with the next audio sent
    watch.sent(chunk(3 * SLACK_MS))
    assert watch.unanswered_since == clock.now


def test_a_pause_after_audio_the_engine_took_in_is_not_a_freeze() -> None:
    clock = FakeClock()
    watch = FreezeWatch(clock, timeout_s=15)
    for start in range(0, 2000, 80):
        watch.sent(chunk(start))
    watch.answered(Progress(1500))  # 2000 ms sent; the last report came 500 ms before the end
    watch.answered(Delta(" more", 900, 1200))  # text held back until more audio comes: no matter
    clock.now += 600  # a ten-minute pause
    watch.check()
    assert watch.unanswered_since is None


def test_closing_owes_closed_and_a_fresh_engine_session_owes_nothing() -> None:
    clock = FakeClock()
    watch = FreezeWatch(clock, timeout_s=15)
    watch.sent(chunk(0))
    watch.answered(Progress(80))
    watch.close_sent()  # all audio was taken in, but Flushed and Closed are owed now
    assert watch.unanswered_since == clock.now
    clock.now += 5
    watch.answered(Flushed(0, 80))
    assert watch.unanswered_since == clock.now, "still closing"
    watch.answered(Closed(80))
    assert watch.unanswered_since is None
    watch.sent(chunk(5000))  # far beyond anything taken in
    assert watch.unanswered_since is not None
    watch.restart(base_ms=5000)  # reset: a fresh engine session starts at the replay's start
    assert watch.unanswered_since is None
    watch.sent(chunk(5080))
    assert watch.unanswered_since is None


def test_idle_warns_once_at_half_the_timeout_then_times_out() -> None:
    clock = FakeClock()
    timers = SessionTimers(clock, idle_timeout_s=10, resume_window_s=30, flow_interval_s=None)
    assert timers.next_due_at() == clock.now + 5, "the warning is the next thing due"
    clock.now += 4.9
    assert timers.due() == Due()
    clock.now += 0.2
    assert timers.due().idle_warning_after_s == pytest.approx(5.1)
    assert timers.next_due_at() == pytest.approx(clock.now + 4.9), "then the timeout"
    clock.now += 1
    assert timers.due() == Due(), "warned once per idle spell"
    timers.activity()  # a keep-alive
    clock.now += 9
    assert timers.due().idle_warning_after_s == pytest.approx(9), "warned again"
    clock.now += 1.1
    assert timers.due() == Due(idle_timeout=True)


def test_a_client_held_back_by_flow_control_is_not_idle() -> None:
    clock = FakeClock()
    timers = SessionTimers(clock, idle_timeout_s=10, resume_window_s=30, flow_interval_s=None)
    timers.held_back(True)
    assert timers.next_due_at() is None, "nothing to wake for while held back"
    for _ in range(30):
        clock.now += 1
        assert timers.due() == Due()
    timers.held_back(False)  # the idle clock starts afresh
    assert timers.next_due_at() == clock.now + 5
    clock.now += 10.5
    assert timers.due().idle_timeout


def test_while_detached_only_the_resume_window_runs() -> None:
    clock = FakeClock()
    timers = SessionTimers(clock, idle_timeout_s=10, resume_window_s=30, flow_interval_s=1)
    assert timers.due() == Due(flow_report=True)
    timers.detached()
    assert timers.next_due_at() == clock.now + 30, "only the resume window"
    clock.now += 29
    assert timers.due() == Due(), "no idle timeout, no FlowStatus while detached"
    timers.attached()  # resumed in time: the idle clock starts afresh
    clock.now += 1
    assert timers.due() == Due(flow_report=True)
    timers.detached()
    clock.now += 30.5
    assert timers.due() == Due(resume_window_passed=True)


def test_flow_reports_come_every_interval() -> None:
    clock = FakeClock()
    timers = SessionTimers(clock, idle_timeout_s=100, resume_window_s=30, flow_interval_s=0.5)
    due = []
    for _ in range(20):  # 2 s in 0.1 s ticks
        due.append(timers.due().flow_report)
        clock.now += 0.1
    assert sum(due) == 4 and due[0]
    assert timers.next_due_at() is not None and timers.next_due_at() <= clock.now + 0.5
