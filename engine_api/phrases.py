"""Phrase hints as an engine gets them, and what an engine does with them (the wire carries the value)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True)
class PhraseHint:
    """A phrase to favour with its boost resolved (the service checked the limits: service/phrase_hints.py)."""

    text: str
    boost: float


class PhraseHintSupport(StrEnum):
    """What an engine does with a session's phrase hints."""

    NONE = ""  # ignores them
    PROMPT = "prompt"  # gives them to its decoder as a prompt; boosts only rank them
    BOOST = "boost"  # biases its decoding toward each phrase by its boost

    @classmethod
    def from_wire(cls, value: str) -> PhraseHintSupport:
        """The support a wire string names; NONE for one this side does not know."""
        try:
            return cls(value)
        except ValueError:
            return cls.NONE
