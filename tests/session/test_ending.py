"""How a session ends, in-process on a fake clock and a fake engine: every way, each with its finals."""

from __future__ import annotations

import grpc

from service import errors
from service.events import Ended, EndReason, FlowReport, Started
from service.session.core import HALF_CLOSE_GRACE_S
from service.session.phase import Phase
from tests.session.harness import SERVER, settle, silence, start


async def test_a_half_close_ends_the_session_with_its_finals() -> None:
    h, c = await start()
    assert isinstance(c.responses[0], Started) and c.responses[0].engine == "fake"
    c.audio(silence(400))
    await settle()
    assert h.engine.stream.received == ["audio 0-80", "audio 80-160", "audio 160-240", "audio 240-320", "audio 320-400"]
    c.half_close()
    await settle()
    assert h.session.phase is Phase.OPEN and "close" not in h.engine.stream.received, (
        "the end of a request stream is a half-close only once the grace has passed"
    )
    await h.clock.advance(HALF_CLOSE_GRACE_S)
    assert h.engine.stream.received[-1] == "close"
    assert c.ended == Ended(EndReason.CLIENT_END, "", 400)
    assert [f.text for f in c.finals()] == ["w0 w80 w160 w240 w320"]
    assert c.done and h.ended == [h.session] and h.session.error is None


async def test_finalize_closes_the_utterance_and_the_stream_goes_on() -> None:
    h, c = await start()
    c.audio(silence(240))
    c.finalize()
    c.audio(silence(160))
    c.half_close()
    await h.clock.advance(HALF_CLOSE_GRACE_S)
    assert h.engine.stream.received == [
        "audio 0-80",
        "audio 80-160",
        "audio 160-240",
        "flush 1",
        "audio 240-320",
        "audio 320-400",
        "close",
    ]
    assert [(f.text, f.utterance_index) for f in c.finals()] == [("w0 w80 w160", 0), ("w240 w320", 1)]
    assert c.ended is not None and c.ended.reason is EndReason.CLIENT_END


async def test_max_duration_ends_input_at_the_cap_with_finals() -> None:
    h, c = await start(max_duration_s=0.3)
    c.audio(silence(400))  # one message past the cap: what is beyond it is not taken
    await settle()
    assert c.ended == Ended(EndReason.MAX_DURATION, "", 300)
    assert [f.text for f in c.finals()] == ["w0 w80 w160 w240"]
    assert h.engine.stream.received[-2:] == ["audio 240-300", "close"]


async def test_idle_warns_then_times_out_and_a_keep_alive_defers_it() -> None:
    h, c = await start(idle_timeout_s=10.0)
    await h.clock.advance(4.9)
    assert c.notices() == []
    await h.clock.advance(0.1)
    assert c.notices() == ["IDLE_WARNING"]
    c.keep_alive()
    await h.clock.advance(9.9)
    assert c.notices() == ["IDLE_WARNING", "IDLE_WARNING"] and c.ended is None, "warned again, not timed out"
    await h.clock.advance(0.1)
    assert c.ended == Ended(EndReason.IDLE_TIMEOUT, "", 0)


async def test_a_bad_message_ends_the_session_with_the_finals_already_earned() -> None:
    h, c = await start()
    c.audio(silence(160))
    c.audio(b"\0" * (SERVER.max_audio_bytes_per_message + 2))
    await settle()
    assert c.ended == Ended(EndReason.ERROR, "", 160)
    assert [f.text for f in c.finals()] == ["w0 w80"]
    error = h.session.error
    assert error is not None and (error.code, error.reason) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        errors.AUDIO_MESSAGE_TOO_LARGE,
    )


async def test_odd_length_linear16_is_invalid_audio() -> None:
    h, c = await start()
    c.audio(b"\0" * 3)
    await settle()
    assert c.ended is not None and c.ended.reason is EndReason.ERROR
    assert h.session.error is not None and h.session.error.reason == errors.INVALID_AUDIO


async def test_draining_interrupts_a_client_that_is_waiting_to_send() -> None:
    h, c = await start()
    c.audio(silence(160))
    await settle()
    h.session.stop_input(EndReason.DRAINING)
    await settle()  # no clock: the stopped stream is not waited on
    assert c.ended == Ended(EndReason.DRAINING, "", 160)
    assert [f.text for f in c.finals()] == ["w0 w80"] and h.engine.stream.received[-1] == "close"


async def test_draining_a_detached_session_ends_it_at_once() -> None:
    h, c = await start()
    c.audio(silence(160))
    await settle()
    await c.hang_up()
    assert h.session.phase is Phase.OPEN
    h.session.stop_input(EndReason.DRAINING)
    await settle()
    assert h.session.ended and h.session.ending.reason is EndReason.DRAINING
    assert h.engine.stream.received[-1] == "close", "with its finals"


async def test_a_stop_while_the_client_is_held_back_ends_with_the_stop_reason_even_if_it_vanishes() -> None:
    h, c = await start()
    h.engine.stream.write_gate.clear()  # the engine takes nothing: the queue fills, the client is held back
    for _ in range(100):
        c.audio(silence(80))
    await settle()
    h.session.stop_input(EndReason.DRAINING)  # the reader is handing audio on, not waiting for the client
    await c.hang_up()
    h.engine.stream.write_gate.set()
    await settle()
    assert h.session.ended and h.session.ending.reason is EndReason.DRAINING
    assert h.engine.stream.received[-1] == "close"


async def test_close_now_ends_at_once_without_waiting_for_the_engine() -> None:
    h, c = await start()
    c.audio(silence(160))
    await settle()
    await h.session.close_now()
    await settle()
    assert c.ended is not None and h.ended == [h.session]
    assert h.engine.stream.cancelled and "close" not in h.engine.stream.received


async def test_a_client_gone_before_any_audio_is_abandoned_and_frees_its_slot_at_once() -> None:
    h, c = await start()
    await c.hang_up()
    assert h.ended == [h.session] and h.session.ending.reason is EndReason.CLIENT_GONE
    assert h.engine.stream.cancelled


async def test_flow_reports_come_every_interval_while_input_is_open() -> None:
    h, c = await start(flow_status_interval_s=1.0)
    c.audio(silence(400))
    await h.clock.advance(2.5)
    reports = c.of_flow()
    assert len(reports) == 3, "at the start, then every second"
    assert reports[-1] == FlowReport(acked_audio_ms=400, acked_audio_bytes=12800, buffered_audio_ms=0, lag_ms=0)
    c.half_close()
    await h.clock.advance(5)
    assert len(c.of_flow()) == 3, "none once input has ended"


# A drain during speech lets the utterance end first (Session.drain): its last final is a natural one, and a
# client that goes on in a new session resends from the Ended's audio_duration.


async def test_a_drain_during_speech_takes_input_until_the_endpoint() -> None:
    from tests.helpers import voiced

    h, c = await start()
    c.audio(voiced(0.5))
    await settle()
    assert h.session._inbound.intake.in_speech
    h.session.drain(within_s=10)
    assert h.session.phase is Phase.STOPPING
    c.audio(voiced(0.3))  # the utterance goes on: taken
    c.audio(silence(1200))  # the endpoint comes 800 ms into the silence: input stops there
    c.audio(voiced(0.5))  # after the endpoint: not taken
    await settle()
    assert c.ended is not None and c.ended.reason is EndReason.DRAINING
    assert 1600 <= c.ended.audio_ms <= 2000, c.ended  # past the endpoint, not the audio after it
    assert c.finals()[-1].end_ms <= c.ended.audio_ms and h.engine.stream.received[-1] == "close"


async def test_a_drain_in_silence_stops_input_at_once() -> None:
    h, c = await start()
    c.audio(silence(160))
    await settle()
    h.session.drain(within_s=10)
    await settle()
    assert c.ended == Ended(EndReason.DRAINING, "", 160)


async def test_a_drain_that_meets_no_endpoint_stops_input_after_its_time() -> None:
    from tests.helpers import voiced

    h, c = await start()
    c.audio(voiced(0.5))
    await settle()
    h.session.drain(within_s=5)
    c.audio(voiced(1.0))
    await settle()
    assert c.ended is None and h.session.phase is Phase.STOPPING
    await h.clock.advance(5)
    await settle()
    assert c.ended is not None and c.ended.reason is EndReason.DRAINING and c.ended.audio_ms == 1500


async def test_a_session_cut_short_counts_only_the_audio_its_finals_cover() -> None:
    h, c = await start()
    c.audio(silence(240))
    c.finalize()  # a flush: the audio so far has its final
    c.audio(silence(160))
    await settle()
    await h.session.close_now()
    await settle()
    assert c.ended is not None and c.ended.audio_ms == 240  # not 400: the last 160 ms have no final
