"""SpeechOrder: end of speech after the utterance's final, whatever order voxgate's events arrive in."""

from __future__ import annotations

from voxgate_client.speech_order import SpeechBoundary, SpeechOrder

START, END = True, False


def test_end_waits_for_the_final() -> None:
    order = SpeechOrder()
    assert order.speech_event(START, 0.5) == [SpeechBoundary(START, 0.5)]
    assert order.speech_event(END, 2.0) == []  # voxgate's VAD is ahead of the engine
    assert order.final() == [SpeechBoundary(END, 2.0)]
    assert not order.speaking


def test_the_next_start_waits_behind_a_held_end() -> None:
    order = SpeechOrder()
    order.speech_event(START, 0.5)
    order.speech_event(END, 2.0)
    assert order.speech_event(START, 3.0) == []  # a backlog: the next utterance starts before the final
    assert order.speech_event(END, 4.0) == []
    assert order.final() == [SpeechBoundary(END, 2.0), SpeechBoundary(START, 3.0)]  # the second END waits
    assert order.final() == [SpeechBoundary(END, 4.0)]


def test_text_after_a_held_end_releases_it() -> None:
    """An utterance with no final (nothing recognised): the next utterance's text ends it."""
    order = SpeechOrder()
    order.speech_event(START, 0.5)
    order.speech_event(END, 1.0)
    assert order.interim(0.8) == []  # text of the held utterance itself
    assert order.interim(2.5) == [SpeechBoundary(END, 1.0), SpeechBoundary(START, 2.5)]


def test_text_without_a_speech_event_starts_speech() -> None:
    order = SpeechOrder()
    assert order.interim(1.2) == [SpeechBoundary(START, 1.2)]
    assert order.interim(1.3) == []


def test_close_flushes_everything_and_ends_open_speech() -> None:
    order = SpeechOrder()
    order.speech_event(START, 0.5)
    order.speech_event(END, 1.0)
    order.speech_event(START, 2.0)
    assert order.close() == [SpeechBoundary(END, 1.0), SpeechBoundary(START, 2.0), SpeechBoundary(END, None)]
    assert order.close() == []


def test_reset_forgets_the_session() -> None:
    order = SpeechOrder()
    order.speech_event(START, 0.5)
    order.speech_event(END, 1.0)
    order.reset()
    assert not order.speaking and order.final() == [] and order.close() == []
