"""A client that vanishes and comes back: the resume window, the resume point, audio held back meanwhile."""

from __future__ import annotations

import grpc
import pytest

from service import errors
from service.events import EndReason
from service.session.core import HALF_CLOSE_GRACE_S
from service.session.phase import Phase
from tests.session.harness import SERVER, settle, silence, start


async def test_a_vanished_client_is_never_taken_for_a_half_close() -> None:
    h, c = await start()
    c.audio(silence(160))
    c.half_close()  # a cancelled RPC ends its request stream too...
    await settle()
    await c.hang_up()  # ...and is cancelled within the grace
    await h.clock.advance(HALF_CLOSE_GRACE_S * 10)
    assert h.session.phase is Phase.OPEN and "close" not in h.engine.stream.received


async def test_after_the_resume_window_the_session_ends_with_its_finals() -> None:
    h, c = await start()
    c.audio(silence(160))
    await settle()
    await c.hang_up()
    await h.clock.advance(SERVER.resume_window_s - 0.1)
    assert not h.session.ended
    await h.clock.advance(0.1)
    assert h.ended == [h.session] and h.session.ending.reason is EndReason.CLIENT_GONE
    assert h.engine.stream.received[-1] == "close"


async def test_resume_continues_the_same_session_without_loss_or_duplicates() -> None:
    h, c = await start()
    c.audio(silence(400))
    await settle()
    last_seq = c.seqs[-1]
    await c.hang_up()
    await h.clock.advance(10)
    # The client knows only 160 ms were acknowledged: it resends from there.
    again = h.resume(audio_bytes=len(silence(160)), last_seq=last_seq)
    again.audio(silence(240 + 160))
    again.half_close()
    await h.clock.advance(HALF_CLOSE_GRACE_S)
    assert again.seqs[0] == last_seq + 1, "it continues after the last response seen"
    received = h.engine.stream.received
    assert received == [f"audio {t}-{t + 80}" for t in range(0, 560, 80)] + ["close"]
    assert again.ended is not None and (again.ended.reason, again.ended.audio_ms) == (EndReason.CLIENT_END, 560)
    assert [f.text for f in c.finals() + again.finals()] == [" ".join(f"w{t}" for t in range(0, 560, 80))]


async def test_a_resend_from_before_the_resume_point_skips_finalize_too() -> None:
    h, c = await start()
    c.audio(silence(160))
    c.finalize()
    c.audio(silence(160))
    await settle()
    last_seq = c.seqs[-1]
    await c.hang_up()
    again = h.resume(audio_bytes=len(silence(160)), last_seq=last_seq)
    again.finalize()  # resent: applied already
    again.audio(silence(160 + 80))
    again.half_close()
    await h.clock.advance(HALF_CLOSE_GRACE_S)
    assert h.engine.stream.received.count("flush 1") == 1 and "flush 2" not in h.engine.stream.received
    assert [f.text for f in c.finals() + again.finals()] == ["w0 w80", "w160 w240 w320"]


async def test_a_finalize_resent_at_the_resume_point_is_not_applied_again() -> None:
    h, c = await start()
    c.audio(silence(160))
    c.finalize()  # no audio after it was acknowledged: the client sends it again
    await settle()
    last_seq = c.seqs[-1]
    await c.hang_up()
    for resumed_at in (0, len(silence(160))):  # from before the point, then from the point itself
        again = h.resume(audio_bytes=resumed_at, last_seq=last_seq)
        again.audio(silence(160)[resumed_at:])
        again.finalize()
        await settle()
        last_seq = again.seqs[-1] if again.seqs else last_seq
        await again.hang_up()
    last = h.resume(audio_bytes=len(silence(160)), last_seq=last_seq)
    last.finalize()
    last.audio(silence(160))
    last.half_close()
    await h.clock.advance(HALF_CLOSE_GRACE_S)
    assert h.engine.stream.received.count("flush 1") == 1 and "flush 2" not in h.engine.stream.received
    assert [f.text for f in c.finals() + last.finals()] == ["w0 w80", "w160 w240"]


async def test_a_second_stream_cannot_attach_and_a_resume_cannot_skip_unseen_responses() -> None:
    h, c = await start()
    c.audio(silence(160))
    await settle()
    with pytest.raises(errors.StreamError) as attached:
        h.session.attach(0, 0)
    assert attached.value.code is grpc.StatusCode.FAILED_PRECONDITION
    await c.hang_up()
    with pytest.raises(errors.StreamError) as beyond:
        h.session.attach(0, c.seqs[-1] + 5)
    assert beyond.value.field == "config.resume_last_seq"
    with pytest.raises(errors.StreamError) as unsent:
        h.session.attach(len(silence(160)) + 2, c.seqs[-1])
    assert unsent.value.field == "config.resume_audio_bytes"
    h.resume(None, c.seqs[-1])  # still there to resume


async def test_a_resumed_client_gets_the_idle_clock_back() -> None:
    h, c = await start(idle_timeout_s=10.0)
    c.audio(silence(80))
    await settle()
    await c.hang_up()
    await h.clock.advance(25)  # detached: no idle timeout
    assert not h.session.ended
    again = h.resume(None, c.seqs[-1])
    await h.clock.advance(10)
    assert again.ended is not None and again.ended.reason is EndReason.IDLE_TIMEOUT


async def test_a_client_held_back_is_not_idle_and_loses_no_audio_when_it_vanishes() -> None:
    h, c = await start(idle_timeout_s=10.0, flow_status_interval_s=1.0)
    first = h.engine.stream
    first.write_gate.clear()  # the engine takes nothing in: the queue fills, then the client is not read
    for _ in range(100):
        c.audio(silence(80))
    await h.clock.advance(60)
    assert not h.session.ended and c.notices() == [], "held back, not idle"
    acked = c.of_flow()[-1].acked_audio_bytes
    assert 0 < acked < 100 * len(silence(80)), "acknowledged up to what the session took"
    await c.hang_up()
    again = h.resume(acked, c.seqs[-1])
    rest = b"\0" * (100 * len(silence(80)) - acked)
    for i in range(0, len(rest), len(silence(80))):
        again.audio(rest[i : i + len(silence(80))])
    again.half_close()
    first.write_gate.set()
    await h.clock.advance(HALF_CLOSE_GRACE_S)
    assert first.received == [f"audio {t}-{t + 80}" for t in range(0, 8000, 80)] + ["close"]
    assert again.ended is not None and again.ended.audio_ms == 8000
