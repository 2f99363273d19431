"""Phrase hints replaced mid-call: after the audio before them, acknowledged, kept across seams, applied once."""

from __future__ import annotations

from engine_api.phrases import PhraseHint
from service import phrase_hints
from service.events import HintsUpdated
from service.session.core import HALF_CLOSE_GRACE_S
from tests.session.harness import settle, silence, start

SIOBHAN = (PhraseHint("Siobhan", 10.0),)


def updates(responses: list[object]) -> list[HintsUpdated]:
    return [r for r in responses if isinstance(r, HintsUpdated)]


async def test_new_hints_reach_the_engine_after_the_audio_before_them_and_are_acknowledged() -> None:
    h, c = await start()
    c.audio(silence(160))
    c.hints("Siobhan")
    c.audio(silence(80))
    c.hints()  # cleared
    await settle()
    assert h.engine.stream.received == ["audio 0-80", "audio 80-160", "hints Siobhan", "audio 160-240", "hints "]
    assert updates(c.responses) == [HintsUpdated(SIOBHAN, 160), HintsUpdated((), 240)]


async def test_a_rejected_replacement_is_a_warning_and_changes_nothing() -> None:
    h, c = await start()
    c.audio(silence(80))
    c.hints(rejected="phrase_hints.phrases[0].value: a phrase hint must not be blank")
    c.audio(silence(80))
    c.half_close()
    await h.clock.advance(HALF_CLOSE_GRACE_S)
    assert not any(r.startswith("hints") for r in h.engine.stream.received)
    assert c.notices() == [phrase_hints.REJECTED_WARNING] and not updates(c.responses)
    assert c.ended is not None and h.session.error is None, "the call goes on"


async def test_an_engine_session_opened_after_a_seam_starts_with_the_latest_hints() -> None:
    h, c = await start(phrase_hints=(PhraseHint("Ozempic", 5.0),))
    c.audio(silence(80))
    c.hints("Siobhan")
    c.audio(silence(80))
    await settle()
    h.engine.stream.lose()
    await settle()
    assert [r.phrase_hints for r in h.engine.requests] == [(PhraseHint("Ozempic", 5.0),), SIOBHAN]


async def test_a_replacement_resent_before_the_resume_point_is_applied_once() -> None:
    h, c = await start()
    c.audio(silence(160))
    c.hints("Siobhan")
    c.audio(silence(80))
    await settle()
    last_seq = c.seqs[-1]
    await c.hang_up()
    again = h.resume(audio_bytes=0, last_seq=last_seq)
    again.audio(silence(160))
    again.hints("Siobhan")  # resent: it came before audio the session has
    again.audio(silence(80 + 80))
    await settle()
    assert h.engine.stream.received.count("hints Siobhan") == 1
    assert len(updates(c.responses + again.responses)) == 1


async def test_a_replacement_resent_at_the_resume_point_is_applied_once_and_a_new_one_after_it_is_applied() -> None:
    h, c = await start()
    c.audio(silence(160))
    c.hints("Siobhan")  # no audio after it was acknowledged: the client keeps it and sends it again
    await settle()
    last_seq = c.seqs[-1]
    await c.hang_up()
    again = h.resume(audio_bytes=len(silence(160)), last_seq=last_seq)
    again.hints("Siobhan")  # resent
    again.hints("Zephyrine")  # new, at the same point
    again.audio(silence(80))
    again.hints("Siobhan")  # new, after new audio
    await settle()
    hints = [r for r in h.engine.stream.received if r.startswith("hints")]
    assert hints == ["hints Siobhan", "hints Zephyrine", "hints Siobhan"]
    assert [u.audio_ms for u in updates(c.responses + again.responses)] == [160, 160, 240]


async def test_an_engine_without_hints_warns_for_each_replacement() -> None:
    h, c = await start()  # the harness's engine reports no phrase-hint support, as sphinx does
    c.hints("Siobhan")
    c.hints()
    await settle()
    assert c.notices() == [phrase_hints.IGNORED_WARNING], "cleared: nothing to ignore"
    assert len(updates(c.responses)) == 2
