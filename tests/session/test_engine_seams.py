"""The engine half: a lost or frozen engine stream is a seam (finalize, reopen, replay); a failed one ends it."""

from __future__ import annotations

import grpc
import pytest

from engine_api.outputs import Diagnostic, DiagnosticKind, Progress
from service import errors
from service.events import Ended, EndReason
from service.session.core import HALF_CLOSE_GRACE_S, Session
from service.session.engine_chain import RECOVERY_RETRY_S
from service.session.engine_source import EngineFull, EngineLost, EngineUnavailable
from service.session.freeze import SLACK_MS
from tests.session.harness import SERVER, SESSION, FakeClock, FakeEngine, real_time_timers, settle, silence, start


async def test_a_lost_engine_is_a_seam_and_unheard_audio_is_replayed_at_its_session_time() -> None:
    h, c = await start()
    first = h.engine.stream
    c.audio(silence(240))
    await settle()
    first.answering = False  # it takes 160 ms more without a word, then the sidecar dies
    c.audio(silence(160))
    await settle()
    first.lose()
    await settle()
    second = h.engine.stream
    assert second is not first and first.cancelled and h.session.engine_restarts == 1
    assert c.notices() == ["ENGINE_RESTARTED"]
    assert second.base_ms == 240 and second.received == ["audio 240-320", "audio 320-400"], "replayed"
    c.audio(silence(80))
    c.half_close()
    await h.clock.advance(HALF_CLOSE_GRACE_S)
    assert [f.text for f in c.finals()] == ["w0 w80 w160", "w240 w320 w400"], "the seam closed an utterance"
    assert c.ended == Ended(EndReason.CLIENT_END, "", 480)


async def test_an_engine_back_within_the_recovery_timeout_takes_the_session_on() -> None:
    h, c = await start()
    c.audio(silence(160))
    await settle()
    h.engine.refusal = EngineUnavailable()
    h.engine.stream.lose()
    await h.clock.advance(5)
    assert h.engine.opens == 1 + int(5 / RECOVERY_RETRY_S) + 1, "tried every RECOVERY_RETRY_S"
    h.engine.refusal = None
    await h.clock.advance(RECOVERY_RETRY_S)
    assert len(h.engine.streams) == 2 and h.engine.stream.base_ms == 160
    c.half_close()
    await h.clock.advance(HALF_CLOSE_GRACE_S)
    assert c.ended == Ended(EndReason.CLIENT_END, "", 160)


async def test_an_engine_that_stays_down_ends_the_session_engine_lost() -> None:
    h, c = await start()
    c.audio(silence(160))
    await settle()
    h.engine.refusal = EngineFull("no slot")
    h.engine.stream.lose()
    await h.clock.advance(SERVER.engine_recovery_timeout_s - 1)
    assert not h.session.ended
    await h.clock.advance(2)
    assert c.ended == Ended(EndReason.ENGINE_LOST, "the speech engine stopped; reconnect to continue", 160)
    assert [f.text for f in c.finals()] == ["w0 w80"]
    error = h.session.error
    assert error is not None and (error.code, error.reason) == (grpc.StatusCode.UNAVAILABLE, errors.ENGINE_UNAVAILABLE)


async def test_an_engine_that_fails_the_session_ends_it_with_an_error_and_its_finals() -> None:
    h, c = await start()
    c.audio(silence(160))
    await settle()
    h.engine.stream.fail()
    await settle()
    assert c.ended == Ended(EndReason.ERROR, "the engine failed on this session", 160)
    assert [f.text for f in c.finals()] == ["w0 w80"]
    assert h.session.error is not None and h.session.error.reason == errors.ENGINE_ERROR
    assert len(h.engine.streams) == 1, "not a seam"


async def test_an_engine_that_stops_taking_audio_in_is_reset_after_the_freeze_timeout() -> None:
    h, c = await start()
    first = h.engine.stream
    first.answering = False
    c.audio(silence(SLACK_MS + 80))  # beyond what an engine may hold unreported
    await h.clock.advance(SERVER.freeze_timeout_s - 0.1)
    assert h.session.freeze_recoveries == 0
    await h.clock.advance(0.1)
    assert h.session.freeze_recoveries == 1 and c.notices().count("ENGINE_RESET") == 1
    second = h.engine.stream
    assert second.base_ms == 0 and len(second.received) == len(first.received), "all of it replayed"


async def test_a_pause_after_audio_the_engine_took_in_is_not_a_freeze() -> None:
    h, c = await start()
    c.audio(silence(SLACK_MS * 3))
    for _ in range(20):  # ten minutes of keep-alives
        await h.clock.advance(30)
        c.keep_alive()
    assert h.session.freeze_recoveries == 0 and len(h.engine.streams) == 1


async def test_diagnostics_are_notices_and_do_not_count_as_progress() -> None:
    h, c = await start()
    first = h.engine.stream
    first.answering = False
    c.audio(silence(SLACK_MS + 80))
    await settle()
    for _ in range(20):
        first.emit(Diagnostic(DiagnosticKind.WARNING, "slow", 0))
        await h.clock.advance(1)
    assert c.notices()[:2] == ["ENGINE_WARNING", "ENGINE_WARNING"]
    assert h.session.freeze_recoveries == 1, "the freeze clock ran on through them"


async def test_a_freeze_at_the_end_is_reset_twice_then_the_interims_become_final() -> None:
    h, c = await start()
    c.audio(silence(160))
    await settle()
    h.engine.stream.answering = False  # it never answers the close
    h.engine.answering = False  # nor do the fresh streams
    c.half_close()
    await h.clock.advance(HALF_CLOSE_GRACE_S)
    await h.clock.advance(SERVER.final_flush_timeout_s)  # shorter than freeze_timeout_s: reset at the deadline
    assert h.session.freeze_recoveries == 1 and h.engine.stream.received == ["close"]
    await h.clock.advance(SERVER.final_flush_timeout_s)
    assert h.session.freeze_recoveries == 2 and not h.session.ended
    await h.clock.advance(SERVER.final_flush_timeout_s)
    assert c.ended == Ended(EndReason.CLIENT_END, "engine did not deliver final results in time", 160)
    assert [f.text for f in c.finals()] == ["w0 w80"]


async def test_an_engine_making_progress_while_closing_gets_more_time() -> None:
    h, c = await start()
    c.audio(silence(160))
    await settle()
    stream = h.engine.stream
    stream.answering = False
    c.half_close()
    await h.clock.advance(HALF_CLOSE_GRACE_S)
    for _ in range(3):
        await h.clock.advance(SERVER.final_flush_timeout_s - 1)
        stream.emit(Progress(160))
    assert not h.session.ended and h.session.freeze_recoveries == 0


async def test_nothing_waits_on_the_real_clock() -> None:
    # Every wait is on the injected clock or on an event: no wait_for per engine output, no polling loop.
    h, c = await start(flow_status_interval_s=1.0)
    c.audio(silence(2000))
    h.engine.stream.answering = False
    c.audio(silence(SLACK_MS + 80))
    await h.clock.advance(3)
    assert real_time_timers() == []
    assert h.clock.pending(), "the session's deadlines are on the fake clock"
    await h.clock.advance(SERVER.freeze_timeout_s)
    assert h.session.freeze_recoveries == 1 and real_time_timers() == []
    c.half_close()
    await h.clock.advance(HALF_CLOSE_GRACE_S)
    assert c.ended is not None and real_time_timers() == []


@pytest.mark.parametrize(
    ("refusal", "reason"),
    [
        (EngineUnavailable(), errors.ENGINE_UNAVAILABLE),
        (EngineFull("no slot"), errors.CAPACITY),
        (EngineLost("refused"), errors.ENGINE_UNAVAILABLE),
    ],
)
async def test_a_session_no_engine_can_take_is_refused_with_a_retry_delay(refusal: Exception, reason: str) -> None:
    engine = FakeEngine()
    engine.refusal = refusal
    session = Session("s1", SESSION, SERVER, engine, FakeClock(), lambda _: None)
    with pytest.raises(errors.StreamError) as refused:
        await session.start()
    assert (refused.value.code, refused.value.reason) == (grpc.StatusCode.UNAVAILABLE, reason)
    assert refused.value.retry_delay_s == SERVER.retry_delay_s and real_time_timers() == []
