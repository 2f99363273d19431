"""Phrase hints: their limits, each named with the field that broke it, and the boost each phrase ends up with.
Google's and Riva's shapes: tests/integration/test_phrase_hints.py (their protos and the service's cannot share a
process)."""

from __future__ import annotations

import pytest

from engine_api.phrases import PhraseHint
from service import errors, phrase_hints
from voxgate_client import Phrase
from voxgate_client.v1 import speech_pb2 as pb


def hints(*phrases: pb.Phrase, boost: float | None = None) -> pb.PhraseHints:
    msg = pb.PhraseHints(phrases=phrases)
    if boost is not None:
        msg.boost = boost
    return msg


def refusal(call: object) -> errors.StreamError:
    with pytest.raises(errors.StreamError) as caught:
        call()  # type: ignore[operator]
    assert caught.value.reason == errors.INVALID_CONFIG
    return caught.value


def test_a_phrase_takes_its_own_boost_else_its_lists_else_the_default() -> None:
    msg = hints(pb.Phrase(value="Ozempic", boost=15), pb.Phrase(value="Voxgate"), boost=5)
    assert phrase_hints.from_proto(msg) == (PhraseHint("Ozempic", 15), PhraseHint("Voxgate", 5))
    got = phrase_hints.from_proto(hints(pb.Phrase(value="Voxgate")))
    assert got == (PhraseHint("Voxgate", phrase_hints.DEFAULT_BOOST),)
    # An explicit 0 is a phrase that does nothing, not the default.
    assert phrase_hints.from_proto(hints(pb.Phrase(value="x", boost=0), boost=5)) == (PhraseHint("x", 0),)


def test_whitespace_is_one_space_between_words() -> None:
    assert phrase_hints.from_proto(hints(pb.Phrase(value="  Siobhan \t Kowalczyk\n"))) == (
        PhraseHint("Siobhan Kowalczyk", phrase_hints.DEFAULT_BOOST),
    )


def test_each_limit_names_its_field() -> None:
    blank = refusal(lambda: phrase_hints.from_proto(hints(pb.Phrase(value="ok"), pb.Phrase(value=" \t"))))
    assert blank.field == "config.phrase_hints.phrases[1].value"
    long = "x" * (phrase_hints.MAX_PHRASE_CHARS + 1)
    too_long = refusal(lambda: phrase_hints.from_proto(hints(pb.Phrase(value=long))))
    assert too_long.field == "config.phrase_hints.phrases[0].value"
    assert f"at most {phrase_hints.MAX_PHRASE_CHARS} characters" in too_long.message
    many = hints(*(pb.Phrase(value=f"p{i}") for i in range(phrase_hints.MAX_PHRASES + 1)))
    too_many = refusal(lambda: phrase_hints.from_proto(many))
    assert too_many.field == "config.phrase_hints.phrases"
    assert f"at most {phrase_hints.MAX_PHRASES}" in too_many.message
    own = refusal(lambda: phrase_hints.from_proto(hints(pb.Phrase(value="a", boost=101))))
    assert own.field == "config.phrase_hints.phrases[0].boost"
    listed = refusal(lambda: phrase_hints.from_proto(hints(pb.Phrase(value="a"), boost=float("nan"))))
    assert listed.field == "config.phrase_hints.boost"
    assert phrase_hints.from_proto(hints(pb.Phrase(value="a", boost=-100)))[0].boost == -100  # the edge is in


def test_the_most_phrases_pass() -> None:
    many = hints(*(pb.Phrase(value="x" * phrase_hints.MAX_PHRASE_CHARS) for _ in range(phrase_hints.MAX_PHRASES)))
    assert len(phrase_hints.from_proto(many)) == phrase_hints.MAX_PHRASES


def test_the_clients_phrase_spec_takes_a_boost_after_the_last_colon() -> None:
    assert Phrase.parse("Siobhan Kowalczyk:15") == Phrase("Siobhan Kowalczyk", 15.0)
    assert Phrase.parse("Voxgate") == Phrase("Voxgate")
    assert Phrase.parse("Ratio 3:2:10") == Phrase("Ratio 3:2", 10.0)
    assert Phrase.parse("ACME: the plan") == Phrase("ACME: the plan")
    assert Phrase("Ozempic").to_proto().HasField("boost") is False
    assert Phrase("Ozempic", 0).to_proto().HasField("boost") is True
