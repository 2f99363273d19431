"""Whisper's judged step (hints.candidates, hints.judged, WhisperDecoder.log_probs): a run spelled only half like
a missing phrase is a candidate, and the phrase is written there only where the model finds that text more likely.
The first tests are the pure rules; the last ones run the real Whisper tiny.en on the keyterm set's clips."""

from __future__ import annotations

import wave
from pathlib import Path

import pytest

from engine_sidecar.engines.whisper.hints import (
    CANDIDATE_SIMILAR,
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
