"""Engine text deltas → interim and final results of one utterance at a time.

Interim text is append-only: a result's text is the previous text plus its
delta. A delta whose text starts with a space starts a new word; otherwise it
continues the last word (sub-word tokens), which extends that word's end.
The final result is the engine's final text for the utterance: the deltas, or
the engine's revision of them (a revisable engine's own final hypothesis). A
final whose text does not start with the last interim text is `revised`: it
replaces what the interims showed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Word:
    word: str
    start_ms: int
    end_ms: int


@dataclass(frozen=True)
class Result:
    result_id: str
    utterance_index: int
    is_final: bool
    text: str
    delta: str
    start_ms: int
    end_ms: int
    words: tuple[Word, ...]
    revised: bool = False  # final only: replaces the utterance's interim text instead of extending it
    channel: int = 0  # 1-based audio channel (separate recognition per channel); 0: the session's only one


class UtteranceAssembler:
    def __init__(self, session_id: str) -> None:
        self._session_id = session_id
        self._index = 0
        self._reset()

    def _reset(self) -> None:
        self._text = ""
        self._words: list[Word] = []
        self._shown = ""  # the text of the last interim result

    @property
    def utterance_index(self) -> int:
        return self._index

    def add(self, text: str, start_ms: int, end_ms: int) -> Result | None:
        """Append a delta; returns the interim result it makes (None if it adds nothing)."""
        delta = self._append(text, start_ms, end_ms)
        if not delta:
            return None
        self._shown = self._text
        return self._result(is_final=False, delta=delta)

    def revise(self, deltas: Iterable[tuple[str, int, int]]) -> None:
        """The engine's final hypothesis, (text, start_ms, end_ms) deltas, replaces the utterance's text.
        It makes no interim result: the final result, at the end of the utterance, carries it."""
        self._text, self._words = "", []
        for text, start_ms, end_ms in deltas:
            self._append(text, start_ms, end_ms)

    def _append(self, text: str, start_ms: int, end_ms: int) -> str:
        delta = text.lstrip() if not self._text else text
        if not delta:
            return ""
        for i, piece in enumerate(text.split(" ")):
            if not piece:
                continue
            if i == 0 and not text.startswith(" ") and self._words:
                last = self._words[-1]
                self._words[-1] = replace(last, word=last.word + piece, end_ms=max(last.end_ms, end_ms))
            else:
                self._words.append(Word(piece, start_ms, end_ms))
        self._text += delta
        return delta

    def finalize(self) -> Result | None:
        """Close the utterance; its final result, or None if it has no text and revises none."""
        revised = not self._text.startswith(self._shown)
        if not self._text.strip() and not revised:
            self._reset()
            return None
        result = replace(self._result(is_final=True, delta=""), revised=revised)
        self._index += 1
        self._reset()
        return result

    def _result(self, is_final: bool, delta: str) -> Result:
        start = self._words[0].start_ms if self._words else 0
        end = max((w.end_ms for w in self._words), default=0)
        return Result(
            result_id=f"{self._session_id}-{self._index}",
            utterance_index=self._index,
            is_final=is_final,
            text=self._text,
            delta=delta,
            start_ms=start,
            end_ms=end,
            words=tuple(self._words),
        )
