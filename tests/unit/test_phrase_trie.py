"""Phrase hints as logit biases (Voxtral's logits processor): which next tokens a phrase's prefix favours."""

from __future__ import annotations

from engine_api.phrases import PhraseHint
from engine_sidecar.engines.voxtral.phrase_trie import FIRST_TOKEN_SHARE, LOGIT_PER_BOOST, PhraseTrie, spellings
from engine_sidecar.engines.voxtral.session_phrases import SessionPhrases

PAD = 32  # a special token (Voxtral's streaming pad): ids below TEXT are not text
TEXT = 1000
SIOBHAN = (1100, 1101, 1102)
OZEMPIC = (1200, 1201)


def test_no_phrases_or_boost_zero_bias_nothing() -> None:
    assert PhraseTrie([]).biases(TEXT, [1100, 1101]) == {}
    assert not PhraseTrie([(SIOBHAN, 0.0)])


def test_first_tokens_get_a_share_and_a_started_phrase_its_next_token() -> None:
    trie = PhraseTrie([(SIOBHAN, 10.0), (OZEMPIC, 20.0)])
    first = {1100: 10 * LOGIT_PER_BOOST * FIRST_TOKEN_SHARE, 1200: 20 * LOGIT_PER_BOOST * FIRST_TOKEN_SHARE}
    assert trie.biases(TEXT, [PAD, 1500]) == first
    assert trie.biases(TEXT, [1100]) == {**first, 1101: 10 * LOGIT_PER_BOOST}
    assert trie.biases(TEXT, [1100, 1101]) == {**first, 1102: 10 * LOGIT_PER_BOOST}
    assert trie.biases(TEXT, [1100, 1101, 1102]) == first, "a whole phrase: only new ones may start"


def test_pads_between_tokens_do_not_hide_a_started_phrase_and_history_comes_in_parts() -> None:
    trie = PhraseTrie([(SIOBHAN, 10.0)])
    assert trie.biases(TEXT, [7, 1100, PAD, PAD], [PAD, 1101, PAD])[1102] == 10 * LOGIT_PER_BOOST
    assert 1102 not in trie.biases(TEXT, [1100, 1500, 1101]), "another text token breaks it"


def test_shared_tokens_take_the_strongest_boost_and_negative_boosts_disfavour() -> None:
    trie = PhraseTrie([((1100, 1101), 5.0), ((1100, 1105), -40.0), ((1100, 1101, 1107), 8.0)])
    after = trie.biases(TEXT, [1100])
    assert after[1101] == 8 * LOGIT_PER_BOOST and after[1105] == -40 * LOGIT_PER_BOOST
    assert after[1100] == -40 * LOGIT_PER_BOOST * FIRST_TOKEN_SHARE


def test_a_phrase_is_spelled_after_a_space_and_at_the_start() -> None:
    def encode(text: str) -> list[int]:
        return [ord(c) for c in text]

    assert spellings(encode, "Oz") == [(32, 79, 122), (79, 122)]
    assert spellings(lambda text: [1], "x") == [(1,)], "one spelling when both tokenize alike"


def test_a_session_replaces_its_phrases_from_the_next_utterance_each_list_under_its_own_key() -> None:
    phrases = SessionPhrases(lambda text: [ord(c) + TEXT for c in text], TEXT, (PhraseHint("Oz", 10.0),))
    first = phrases.arg
    assert first is not None and first["text_from"] == TEXT
    assert [boost for boost, _ in first["phrases"]] == [10.0, 10.0], "after a space, and at the start"
    phrases.heard(True)
    phrases.replace((PhraseHint("Siobhan", 20.0),))
    assert phrases.arg is first and phrases.version == 0, "the utterance in progress keeps its list"
    phrases.utterance_ended()
    assert phrases.version == 1 and phrases.arg is not None and phrases.arg["key"] != first["key"]
    phrases.replace((PhraseHint("Oz", 0.0),))  # between utterances: at once; boost 0 biases nothing
    assert phrases.version == 2 and phrases.arg is None
