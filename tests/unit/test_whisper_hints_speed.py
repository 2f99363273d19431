"""Whisper's spelling step (hints.spelled): a run of words spelled nearly as a hinted phrase is written as the
phrase, from a similarity of SIMILAR (0.8) up, and its prefilters, there for speed, drop nothing that matches."""

from __future__ import annotations

from engine_sidecar.engines.whisper.hints import SIMILAR, similarity, spelled
from engine_sidecar.engines.words import Word


def words(*texts: str) -> list[Word]:
    return [Word(t, 1000 * k, 1000 * k + 900) for k, t in enumerate(texts)]


def test_a_run_spelled_nearly_as_a_phrase_is_the_phrase_from_the_threshold_up() -> None:
    # "przybilski" keys as "prsibilski" (z as s, y as i); two of its ten letters off is 0.8, three is 0.7
    assert similarity("brsibilsko", "prsibilski") == SIMILAR
    at = spelled(words("call", "Brsybilsko,", "please"), ["Przybilski"])
    assert at == [Word("call", 0, 900), Word("Przybilski,", 1000, 1900), Word("please", 2000, 2900)]
    below = words("call", "Brsybelsko,", "please")
    assert spelled(below, ["Przybilski"]) == below


def test_a_run_of_words_becomes_the_phrase_over_its_time_span() -> None:
    got = spelled(words("at", "Bright", "Lain."), ["bright lane"])
    assert got == [Word("at", 0, 900), Word("bright", 1000, 1950), Word("lane.", 1950, 2900)]


def test_many_phrases_that_match_nothing_change_nothing() -> None:
    heard = words("the", "Przybilski", "account", "closes", "tomorrow")
    others = [f"{a}{b}{c} zorbulon" for a in "dfgjv" for b in "aeiou" for c in "mnrtw"]  # 125, none near
    assert spelled(heard, others) == heard
    assert spelled(heard, [*others, "Pshybilski"])[1] == Word("Pshybilski", 1000, 1900)  # 0.8: the last one counts


def test_short_runs_and_short_phrases_are_left_alone() -> None:
    heard = words("Jon", "met", "Ann")
    assert spelled(heard, ["John", "Anne"]) == heard


def test_a_phrase_already_said_swallows_no_word_before_it() -> None:
    # "is Siobhan Kowalczyk" spells 0.89 like the phrase: rewriting it would drop "is"
    heard = words("this", "is", "Siobhan", "Kowalczyk")
    assert spelled(heard, ["Siobhan Kowalczyk"]) == heard
