"""Phrase hints on Whisper: the prompt that carries them, and the guard that keeps them from costing the rest.

Whisper takes hints as text before the audio's (faster-whisper's "hotwords"): the model then writes the names it
was shown. Measured (bench/keyterms.py, docs/benchmarks.md) that alone finds most key terms and also costs text
elsewhere: a prompt of 50 names made the WER corpus worse (case and commas aside: a repetition loop, a lost
phrase, a name where none was said). So an utterance's final decode runs twice, without and with the hints, and
the hinted words are taken only where they say a hinted phrase the plain decode did not, without stopping early
or running on. Hinted words fewer than the plain ones by more than their new names account for are also scored
by the model against them, and dropped when far less likely (a long prompt of names can make the beam write one
where none was said, losing words). The hinted decode searches wider (HINTED_BEAM). Then a run of words spelled
nearly as a phrase ("Przybilski", "Tlaquepagui", "bright lane") is written as the phrase. Last, a run spelled only
half like a phrase that is still missing ("Kate's all -code" for "Quetzalcoatl") is a candidate, and the model
decides: the utterance's text with the phrase there is scored against the text as it is, both forced through the
decoder with the hints in its prompt, and the phrase is written only where the model itself finds that text more
likely (the beam search missed it). Interims are decoded without hints.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

from engine_api.edit_distance import edit_distance
from engine_api.phrases import PhraseHint
from engine_sidecar.engines.words import Word

# A hinted decode whose last word ends this much before the plain one's stopped after the name (seen: "...
# Siobhan Kowalco" and nothing after it).
CUT_SHORT_MS = 1000
# A hinted decode this much longer than the plain one runs on (a repetition loop).
RUN_ON_RATIO = 1.5
RUN_ON_WORDS = 3
HINTED_BEAM = 5  # measured: 21 of 34 key terms against 18 greedy (docs/benchmarks.md)
# Hinted words that may have lost words (may_have_lost_words) are kept unless the model, scoring both texts with
# the gained phrases as the hint, finds them more than e^HINTED_MARGIN times less likely than the plain ones. The
# wider beam and the longer prompt find names the plain words make unlikely: measured on the keyterm set, hinted
# texts with a true name scored down to -16 nats below the plain ones (a decode that also lost two words); a name
# written where none was said in the WER corpus (50 unrelated hints), -40. One example of each side: the margin is
# not tuned.
HINTED_MARGIN = 20.0
# A run of up to MAX_RUN words whose letters are this similar to a phrase's (1 - edit distance / length) is the
# phrase misspelled; runs of fewer than MIN_LETTERS letters are left alone (short words match too much).
SIMILAR = 0.8
MAX_RUN = 3
MIN_LETTERS = 5
# Candidates for the model to judge: runs of up to a phrase's words + CANDIDATE_EXTRA_WORDS words (a name heard as
# several short words) at least this similar. At most MAX_CANDIDATES per utterance, the most similar, each one
# decoder pass of the utterance's text.
CANDIDATE_SIMILAR = 0.5
CANDIDATE_EXTRA_WORDS = 2
MAX_CANDIDATES = 16


def phrases(hints: tuple[PhraseHint, ...]) -> tuple[str, ...]:
    """The favoured phrases (positive boost), the strongest first: the prompt has room for about 110 tokens of
    them, and boosts only rank them."""
    return tuple(h.text for h in sorted((h for h in hints if h.boost > 0), key=lambda h: -h.boost))


def prompt(hinted: Sequence[str]) -> str:
    return ", ".join(hinted)


def _tokens(text: str) -> list[str]:
    return re.findall(r"[\w']+", text.lower())


def says(phrase: str, words: Sequence[Word]) -> bool:
    """The phrase's words, in a row, among the words (case and punctuation aside)."""
    want = _tokens(phrase)
    heard = _tokens(" ".join(w.text for w in words))
    return bool(want) and any(heard[i : i + len(want)] == want for i in range(len(heard) - len(want) + 1))


# Spellings of one sound, compared as one (a rough phonetic key: "Efyrine" is "Zephyrine" misheard).
SOUNDS = (("ph", "f"), ("ck", "k"), ("q", "k"), ("c(?=[eiy])", "s"), ("c", "k"), ("z", "s"), ("x", "ks"), ("y", "i"))


def _letters(text: str) -> str:
    return re.sub(r"[^a-z]", "", text.lower())


def _sounds(letters: str) -> str:
    for spelling, sound in SOUNDS:
        letters = re.sub(spelling, sound, letters)
    return re.sub(r"(.)\1", r"\1", letters)  # doubled letters as one


def similarity(a: str, b: str) -> float:
    """1 - the edit distance of a and b over the longer one's length."""
    return 1 - edit_distance(a, b) / max(len(a), len(b), 1)


def _as_phrase(run: Sequence[Word], phrase: str) -> list[Word]:
    """The phrase's words over the run's time span (split evenly), the run's trailing punctuation kept."""
    names = phrase.split()
    trailing = re.search(r"[^\w']*$", run[-1].text)
    names[-1] += trailing.group() if trailing else ""
    start, end = run[0].start_ms, run[-1].end_ms
    step = (end - start) / len(names)
    return [Word(n, start + round(k * step), start + round((k + 1) * step)) for k, n in enumerate(names)]


class _Key(NamedTuple):
    """What the spelling step compares of a run of words or a phrase, worked out once."""

    letters: int  # how many letters
    sound: str  # the sound key (_sounds)
    seen: int  # a bit for each letter in the sound key
    counts: Counter[str]  # of each letter of the sound key


def _key(letters: str) -> _Key:
    sound = _sounds(letters)
    return _Key(len(letters), sound, sum(1 << (ord(c) - 97) for c in set(sound)), Counter(sound))


_phrase_key = functools.lru_cache(maxsize=4096)(_key)  # the same phrases come with every utterance


def _may_match(run: _Key, target: _Key, threshold: float = SIMILAR) -> bool:
    """False only where the similarity cannot reach the threshold, found without the edit distance (quadratic: 500
    phrases over a 48-word utterance took 1 s of CPU with only the length bound). The length bound (on letters,
    with room for the sound key's changes) is the one spelled() always had. The others are true lower bounds of the
    edit distance, each edit taking away at most one letter that one side has more of than the other: the letters
    only one side has (cheap, bits), then all such surplus (Counter). A pair they drop could not have matched."""
    longer = max(run.letters, target.letters)
    if run.letters < MIN_LETTERS or abs(run.letters - target.letters) > (1 - threshold) * longer + 2:
        return False
    # The same arithmetic as similarity(), so that the bounds hold in floating point too.
    length = max(len(run.sound), len(target.sound), 1)
    only = max((run.seen & ~target.seen).bit_count(), (target.seen & ~run.seen).bit_count())
    if 1 - only / length < threshold:
        return False
    surplus = max(sum((run.counts - target.counts).values()), sum((target.counts - run.counts).values()))
    return 1 - surplus / length >= threshold


def spelled(words: Sequence[Word], hinted_phrases: Sequence[str]) -> list[Word]:
    """The words with each run of up to MAX_RUN words spelled nearly as a phrase the words do not say yet written as
    the phrase."""
    out = list(words)
    keyed: dict[str, _Key] = {}  # by the run's text: each run is keyed once, not again for every phrase

    def key(run: Sequence[Word]) -> _Key:
        text = "".join(w.text for w in run)
        if text not in keyed:
            keyed[text] = _key(_letters(text))
        return keyed[text]

    def runs() -> list[_Key]:
        return [key(out[i : i + n]) for i in range(len(out)) for n in range(1, min(MAX_RUN, len(out) - i) + 1)]

    current = runs()  # the runs of out as it is now
    for phrase in hinted_phrases:
        target = _letters(phrase)
        if len(target) < MIN_LETTERS or says(phrase, out):  # said: a run around it would swallow a word ("is")
            continue
        goal = _phrase_key(target)
        if not any(_may_match(run, goal) for run in current):
            continue  # most phrases: no run can be this one, so the walk below would change nothing
        i = 0
        while i < len(out):
            best: tuple[float, int] | None = None
            for n in range(1, min(MAX_RUN, len(out) - i) + 1):
                run = key(out[i : i + n])
                score = similarity(run.sound, goal.sound) if _may_match(run, goal) else 0.0
                if score >= SIMILAR and (best is None or score > best[0]):
                    best = (score, n)
            if best is None:
                i += 1
                continue
            replacement = _as_phrase(out[i : i + best[1]], phrase)
            out[i : i + best[1]] = replacement
            i += len(replacement)
        current = runs()
    return out


def gained(plain: Sequence[Word], hinted: Sequence[Word], hinted_phrases: Sequence[str]) -> list[str]:
    """The phrases the hinted words say and the plain words do not."""
    return [p for p in hinted_phrases if says(p, hinted) and not says(p, plain)]


def may_have_lost_words(plain: Sequence[Word], hinted: Sequence[Word], gained: Sequence[str]) -> bool:
    """Whether the hinted words are fewer than the plain ones by more than their gained phrases account for: each
    stands for its own words and up to CANDIDATE_EXTRA_WORDS more misheard pieces ("Kate's all -code")."""
    allowed = sum(len(p.split()) + CANDIDATE_EXTRA_WORDS for p in gained)
    return len(plain) - len(hinted) > allowed


def choose(plain: Sequence[Word], hinted: Sequence[Word], gained: Sequence[str]) -> Sequence[Word]:
    """The hinted words where they gain phrases (`gained`) and otherwise cover what the plain words cover; else
    plain."""
    if not hinted or not gained:
        return plain
    if plain and hinted[-1].end_ms < plain[-1].end_ms - CUT_SHORT_MS:
        return plain  # cut short after the name
    if len(hinted) > RUN_ON_RATIO * len(plain) + RUN_ON_WORDS:
        return plain  # runs on
    return hinted


class Candidate(NamedTuple):
    """A run of the words written as a missing phrase, for the model to judge."""

    written: tuple[Word, ...]  # the run, as the phrase
    phrase: str
    start: int  # the run's first word
    run_words: int  # how many words the run has
    similarity: float

    def applied_to(self, words: Sequence[Word]) -> list[Word]:
        """`words` with the run written as the phrase."""
        return [*words[: self.start], *self.written, *words[self.start + self.run_words :]]


def candidates(words: Sequence[Word], hinted_phrases: Sequence[str]) -> list[Candidate]:
    """Each run of words spelled at least CANDIDATE_SIMILAR like a phrase the words do not say, written as the
    phrase: the MAX_CANDIDATES most similar."""
    found: list[Candidate] = []
    keyed: dict[tuple[int, int], _Key] = {}  # each run keyed once, not again for every phrase
    for phrase in hinted_phrases:
        target = _letters(phrase)
        if len(target) < MIN_LETTERS or says(phrase, words):
            continue
        goal = _phrase_key(target)
        longest = len(phrase.split()) + CANDIDATE_EXTRA_WORDS
        for i in range(len(words)):
            for n in range(1, min(longest, len(words) - i) + 1):
                if (i, n) not in keyed:
                    keyed[i, n] = _key(_letters("".join(w.text for w in words[i : i + n])))
                run = keyed[i, n]
                if not _may_match(run, goal, CANDIDATE_SIMILAR):
                    continue
                score = similarity(run.sound, goal.sound)
                if score >= CANDIDATE_SIMILAR:
                    found.append(Candidate(tuple(_as_phrase(words[i : i + n], phrase)), phrase, i, n, score))
    return sorted(found, key=lambda c: -c.similarity)[:MAX_CANDIDATES]


def judged(words: Sequence[Word], found: Sequence[Candidate], gains: Sequence[float]) -> list[Word]:
    """The words with each candidate the model prefers (gain: its log-probability over the words', > 0) written
    in, the largest gain first, where no run taken before overlaps it."""
    taken: list[Candidate] = []
    for candidate, gain in sorted(zip(found, gains, strict=True), key=lambda pair: -pair[1]):
        end = candidate.start + candidate.run_words
        if gain > 0 and not any(c.start < end and candidate.start < c.start + c.run_words for c in taken):
            taken.append(candidate)
    out = list(words)
    for c in sorted(taken, key=lambda c: -c.start):  # from the end, so earlier runs keep their indexes
        out = c.applied_to(out)
    return out
