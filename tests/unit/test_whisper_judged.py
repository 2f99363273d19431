"""Whisper's judged steps (hints.candidates, hints.judged, WhisperDecoder.log_probs): a run spelled only half like
a missing phrase is a candidate, and the phrase is written there only where the model finds that text more likely;
hinted words the model finds far less likely than the plain ones are not taken. The first tests are the pure rules
(the decoder's over scripted decodes); the last ones run the real Whisper tiny.en on the keyterm set's clips."""

from __future__ import annotations

import wave
from pathlib import Path

import pytest

from engine_sidecar.engines.whisper.hints import (
    CANDIDATE_SIMILAR,
    HINTED_MARGIN,
    MAX_CANDIDATES,
    candidates,
    judged,
    says,
    similarity,
)
from engine_sidecar.engines.words import Word

KEYTERMS = Path(__file__).resolve().parents[1] / "fixtures/keyterms"


def words(*texts: str) -> list[Word]:
    return [Word(t, 1000 * k, 1000 * k + 900) for k, t in enumerate(texts)]


def test_a_run_spelled_half_like_a_missing_phrase_is_a_candidate_over_its_time_span() -> None:
    heard = words("from", "Kate's", "all", "-code", "logistics.")
    (only,) = candidates(heard, ["Quetzalcoatl"])
    assert (only.start, only.run_words, only.similarity) == (1, 3, CANDIDATE_SIMILAR)
    assert only.written == (Word("Quetzalcoatl", 1000, 3900),)
    assert only.applied_to(heard) == [heard[0], Word("Quetzalcoatl", 1000, 3900), heard[4]]


def test_no_candidate_for_a_phrase_already_said_or_for_runs_too_unlike_it() -> None:
    assert candidates(words("from", "Quetzalcoatl", "logistics"), ["Quetzalcoatl"]) == []
    assert similarity("tuesdai", "gdansk") < CANDIDATE_SIMILAR
    assert candidates(words("on", "Tuesday"), ["Gdansk"]) == []


def test_candidates_are_the_most_similar_few() -> None:
    heard = words(*(f"Ketsal{c}oat" for c in "bdfghjlmnprstvw"), "and", "Quetzalcoat")
    found = candidates(heard, ["Quetzalcoatl"])
    assert len(found) == MAX_CANDIDATES
    assert [c.similarity for c in found] == sorted((c.similarity for c in found), reverse=True)
    assert (found[0].start, found[0].run_words) == (16, 1)  # the nearest run of all is among them


def test_only_a_candidate_the_model_prefers_is_written_the_larger_gain_first_where_runs_overlap() -> None:
    heard = words("Gdah", "and", "SK", "and", "Kate's", "all", "-code")
    found = candidates(heard, ["Gdansk", "Quetzalcoatl"])
    assert judged(heard, found, [-1.0] * len(found)) == heard
    gains = [
        5.0 if (c.start, c.run_words) == (4, 3) else 2.0 if (c.start, c.run_words) == (0, 3) else 1.0 for c in found
    ]
    assert [w.text for w in judged(heard, found, gains)] == ["Gdansk", "and", "Quetzalcoatl"]


class ScriptedDecoder:
    """WhisperDecoder.transcribe's own rules over scripted decodes and forced scores: no model."""

    def __init__(self, plain: list[Word], hinted: list[Word], scores: dict[str, float]) -> None:
        from engine_sidecar.engines.whisper.decoder import Hypothesis, WhisperDecoder

        self.decoder = object.__new__(WhisperDecoder)
        self.encoder_runs = 0

        def decode(pcm: bytes, offset: int, prompt: str, language: str, hotwords: str, beam: int = 1) -> object:
            return Hypothesis(tuple(hinted if hotwords else plain))

        def forced(pcm: bytes, language: str) -> object:
            self.encoder_runs += 1
            return lambda texts, prompt, hotwords: [scores[t] for t in texts]

        self.decoder._transcribe = decode  # type: ignore[method-assign]
        self.decoder._forced = forced  # type: ignore[method-assign]

    def words(self, phrases: tuple[str, ...]) -> str:
        return " ".join(w.text for w in self.decoder.transcribe(b"\0\0" * 16000, 0, phrases=phrases).words)


def test_hinted_words_far_less_likely_than_the_plain_ones_are_not_taken() -> None:
    plain = words("so", "this", "is", "the", "sick", "corpus", "I", "have", "a", "cold")
    hinted = [*plain[:3], Word("Siobhan", 3000, 6000), Word("Kowalczyk", 6000, 9900)]  # a name; the rest lost
    texts = [" ".join(w.text for w in ws) for ws in (plain, hinted)]
    for deficit, taken in (
        (HINTED_MARGIN + 1, "so this is the sick corpus I have a cold"),
        (HINTED_MARGIN - 1, texts[1]),
    ):
        scripted = ScriptedDecoder(plain, hinted, {texts[0]: -10.0, texts[1]: -10.0 - deficit})
        assert scripted.words(("Siobhan Kowalczyk", "Zephyrine")) == taken
        assert scripted.encoder_runs == 1


def test_no_forced_pass_where_the_hinted_words_gain_nothing_or_lose_no_word() -> None:
    plain = words("call", "me", "back")
    scripted = ScriptedDecoder(plain, words("Call", "me", "back."), {})
    assert scripted.words(("Siobhan Kowalczyk",)) == "call me back"
    assert scripted.encoder_runs == 0
    scripted = ScriptedDecoder(words("call", "Sheldon", "back"), words("call", "Siobhan", "back"), {})
    assert scripted.words(("Siobhan",)) == "call Siobhan back"
    assert scripted.encoder_runs == 0
    # fewer words, as many fewer as a name heard in pieces accounts for (its words + CANDIDATE_EXTRA_WORDS)
    plain = words("from", "Kate's", "all", "-code", "logistics")
    hinted = [plain[0], Word("Quetzalcoatl", 1000, 3900), Word("logistics", 4000, 4900)]
    scripted = ScriptedDecoder(plain, hinted, {})
    assert scripted.words(("Quetzalcoatl",)) == "from Quetzalcoatl logistics"
    assert scripted.encoder_runs == 0


def clip(name: str) -> bytes:
    with wave.open(str(KEYTERMS / name)) as w:
        return w.readframes(w.getnframes())


@pytest.fixture(scope="module")
def decoder() -> object:
    from engine_sidecar.engines.whisper.decoder import WhisperDecoder
    from engine_sidecar.engines.whisper.model import default_source

    return WhisperDecoder(default_source().directory, threads=1)


def test_the_model_writes_a_name_its_beam_search_missed(decoder: object) -> None:
    """Measured: with the hint in the prompt the beam writes "Kate's all -code"; forced through the decoder,
    the text with "Quetzalcoatl" there is far more likely, so the name is written."""
    pcm = clip("the_shipment_from_quetzalcoatl_slt.wav")
    heard = decoder.transcribe(pcm, 0, phrases=("Quetzalcoatl",)).words  # type: ignore[attr-defined]
    assert says("Quetzalcoatl", heard)
    plain = "The shipment from Kate's all -code logistics arrives on Tuesday."
    hinted = "The shipment from Quetzalcoatl logistics arrives on Tuesday."
    plain_lp, hinted_lp = decoder.log_probs(pcm, [plain, hinted], "", "en", "Quetzalcoatl")  # type: ignore[attr-defined]
    assert hinted_lp > plain_lp


def test_the_model_keeps_what_it_heard_where_it_finds_the_name_less_likely(decoder: object) -> None:
    """Measured: "UVAHNSK" for "Gdansk" is a candidate (0.57 similar), and the model finds it more likely than
    "Gdansk" there: it stays."""
    pcm = clip("send_the_invoice_to_slt.wav")
    said = "Send the invoice Przybylski and Sons in"
    heard_lp, name_lp = decoder.log_probs(  # type: ignore[attr-defined]
        pcm, [f"{said} UVAHNSK", f"{said} Gdansk"], "", "en", "Przybylski, Gdansk"
    )
    assert heard_lp > name_lp
