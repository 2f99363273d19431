"""Word hypotheses the re-decoding engines (sphinx, whisper) share: what two hypotheses agree on, and how an
utterance's final hypothesis ends it (deltas that extend what was said, or one Revision replacing it)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from engine_api.outputs import Delta, EngineOutput, Revision


@dataclass(frozen=True)
class Word:
    text: str
    start_ms: int
    end_ms: int


def word_key(text: str) -> str:
    """A word as two decodes must agree on it: without case or punctuation."""
    return re.sub(r"[^\w']", "", text.lower())


def delta(w: Word) -> Delta:
    return Delta(text=" " + w.text, start_ms=w.start_ms, end_ms=w.end_ms)


def texts(words: list[Word]) -> list[str]:
    return [w.text for w in words]


def agreed_prefix(hypotheses: list[list[Word]], key: Callable[[str], str] = str) -> int:
    """How many leading words every hypothesis shares, compared by key(text)."""
    same = key
    n = 0
    for column in zip(*hypotheses, strict=False):
        if any(same(w.text) != same(column[0].text) for w in column):
            break
        n += 1
    return n


def final_outputs(committed: list[Word], final: list[Word]) -> list[EngineOutput]:
    """What ends an utterance whose deltas so far said `committed` and whose final hypothesis is `final`:
    the words final adds when it starts with exactly the committed words, else a Revision to final."""
    done = len(committed)
    if texts(final[:done]) == texts(committed):
        return [delta(w) for w in final[done:]]
    return [Revision(tuple(delta(w) for w in final))]
