"""A Voxtral session's phrase hints as its requests carry them: tokenized once per list, replaced mid-call from
the next utterance on (the one in progress keeps the list it began with)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from engine_api.phrases import PhraseHint
from engine_sidecar.engines.voxtral.phrase_trie import phrases_arg, spellings

Encode = Callable[[str], list[int]]  # text -> token ids, without BOS/EOS


class SessionPhrases:
    """`arg` is what each step's SamplingParams.extra_args carries (phrase_trie.PHRASES_ARG), None for none;
    `version` counts its changes, so a request knows when its steps need new params."""

    def __init__(self, encode: Encode, first_text_id: int, hints: tuple[PhraseHint, ...]) -> None:
        self._encode = encode
        self._first_text_id = first_text_id
        self._speaking = False  # speech came since the last flush
        self._next: tuple[PhraseHint, ...] | None = None
        self.version = 0
        self.arg = self._arg(hints)

    def heard(self, speech: bool) -> None:
        self._speaking = self._speaking or speech

    def replace(self, hints: tuple[PhraseHint, ...]) -> None:
        if self._speaking:
            self._next = hints
        else:
            self._use(hints)

    def utterance_ended(self) -> None:
        self._speaking = False
        if self._next is not None:
            hints, self._next = self._next, None
            self._use(hints)

    def _use(self, hints: tuple[PhraseHint, ...]) -> None:
        self.version += 1
        self.arg = self._arg(hints)

    def _arg(self, hints: tuple[PhraseHint, ...]) -> dict[str, Any] | None:
        phrases = [(tokens, h.boost) for h in hints if h.boost for tokens in spellings(self._encode, h.text)]
        if not phrases:
            return None
        # The key names this list in every worker's cache of built tries: unique across sessions, their reopens
        # after a seam and the front ends that share an engine core.
        return phrases_arg(uuid.uuid4().hex, self._first_text_id, phrases)
