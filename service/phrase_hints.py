"""Phrase hints: the checks and limits of voxgate.v1 PhraseHints, shared by the Riva and Google endpoints.

A phrase's boost is its own, else its list's, else DEFAULT_BOOST; engines get each phrase with that
boost (engine_api.phrases.PhraseHint). Every bound is reported in GetCapabilities.phrase_hints.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from engine_api.phrases import PhraseHint, PhraseHintSupport
from voxgate_client.v1 import speech_pb2 as pb

from . import errors
from .client_text import quoted

MAX_PHRASES = 500  # per session: a contact centre's product list, a meeting's names
MAX_PHRASE_CHARS = 100  # a name or a product, not a paragraph
MIN_BOOST, MAX_BOOST = -100.0, 100.0  # the vendors' scale (Google and Riva suggest 5..20; negative disfavours)
DEFAULT_BOOST = 10.0

SUPPORT = {
    PhraseHintSupport.NONE: pb.PHRASE_HINT_SUPPORT_NONE,
    PhraseHintSupport.PROMPT: pb.PHRASE_HINT_SUPPORT_PROMPT,
    PhraseHintSupport.BOOST: pb.PHRASE_HINT_SUPPORT_BOOST,
}
IGNORED_WARNING = "PHRASE_HINTS_IGNORED"
REJECTED_WARNING = "PHRASE_HINTS_REJECTED"  # a mid-call replacement broke a limit: the hints stay as they were


class SpeechContext(Protocol):
    """Google's and Riva's SpeechContext message."""

    @property
    def phrases(self) -> Iterable[str]: ...

    @property
    def boost(self) -> float: ...


@dataclass(frozen=True)
class Candidate:
    """A phrase as a request gave it: its text, its own or its list's boost (None: unset), and the request's
    field names for both (errors name them as the client wrote them)."""

    value: str
    boost: float | None
    field: str
    boost_field: str


def checked(candidates: Iterable[Candidate], list_field: str) -> tuple[PhraseHint, ...]:
    """The phrases as engines get them; INVALID_ARGUMENT naming the field of the first that breaks a limit."""
    given = list(candidates)
    if len(given) > MAX_PHRASES:
        raise errors.invalid_config(list_field, f"at most {MAX_PHRASES} phrase hints per session (got {len(given)})")
    hints = []
    for c in given:
        text = " ".join(c.value.split())  # one space between words, none around them
        if not text:
            raise errors.invalid_config(c.field, "a phrase hint must not be blank")
        if len(text) > MAX_PHRASE_CHARS:
            raise errors.invalid_config(
                c.field, f"a phrase hint has at most {MAX_PHRASE_CHARS} characters (got {len(text)}: {quoted(text)})"
            )
        boost = DEFAULT_BOOST if c.boost is None else c.boost
        if not (math.isfinite(boost) and MIN_BOOST <= boost <= MAX_BOOST):
            raise errors.invalid_config(c.boost_field, f"boost must be {MIN_BOOST:g}..{MAX_BOOST:g} (got {boost:g})")
        hints.append(PhraseHint(text, boost))
    return tuple(hints)


def speech_contexts(contexts: Iterable[SpeechContext], field: str) -> list[Candidate]:
    """Google's and Riva's `speech_contexts` (repeated {phrases, boost}); a boost of 0 is unset there."""
    return [
        Candidate(phrase, ctx.boost or None, f"{field}[{i}].phrases[{j}]", f"{field}[{i}].boost")
        for i, ctx in enumerate(contexts)
        for j, phrase in enumerate(ctx.phrases)
    ]


def vendor_hints(candidates: list[Candidate], list_field: str) -> pb.PhraseHints:
    """A vendor request's phrases, checked under its own field names, as voxgate.v1 PhraseHints."""
    return to_proto(checked(candidates, list_field))


def from_proto(msg: pb.PhraseHints, field: str = "config.phrase_hints") -> tuple[PhraseHint, ...]:
    """voxgate.v1 PhraseHints, checked."""
    list_boost = msg.boost if msg.HasField("boost") else None
    candidates = (
        Candidate(
            p.value,
            p.boost if p.HasField("boost") else list_boost,
            f"{field}.phrases[{i}].value",
            f"{field}.phrases[{i}].boost" if p.HasField("boost") else f"{field}.boost",
        )
        for i, p in enumerate(msg.phrases)
    )
    return checked(candidates, f"{field}.phrases")


def to_proto(hints: tuple[PhraseHint, ...]) -> pb.PhraseHints:
    """The phrases as the session applies them (SessionStarted.effective_config): each with its boost."""
    return pb.PhraseHints(phrases=[pb.Phrase(value=h.text, boost=h.boost) for h in hints])


def capabilities(engine_value: str | None) -> pb.PhraseHintCapabilities:
    """GetCapabilities.phrase_hints: the limits, and what the engine (its wire string; None: not known yet) does."""
    support = pb.PHRASE_HINT_SUPPORT_UNSPECIFIED
    if engine_value is not None:
        support = SUPPORT[PhraseHintSupport.from_wire(engine_value)]
    return pb.PhraseHintCapabilities(
        support=support,
        max_phrases=MAX_PHRASES,
        max_phrase_chars=MAX_PHRASE_CHARS,
        min_boost=MIN_BOOST,
        max_boost=MAX_BOOST,
        default_boost=DEFAULT_BOOST,
    )


def session_support(hints: tuple[PhraseHint, ...], support: PhraseHintSupport) -> pb.PhraseHintSupport.ValueType:
    """SessionStarted.phrase_hints: what the engine does with this session's hints (UNSPECIFIED: none given)."""
    return SUPPORT[support] if hints else pb.PHRASE_HINT_SUPPORT_UNSPECIFIED
