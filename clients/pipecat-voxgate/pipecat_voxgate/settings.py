"""The service's settings: Pipecat's STTSettings with voxgate's key terms (phrase hints)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipecat.services.settings import STTSettings
from pipecat.utils.types import NOT_GIVEN, NotGiven

from voxgate_client import Phrase, as_phrases

__all__ = ["VoxgateSTTSettings", "keyterm_phrases"]


@dataclass
class VoxgateSTTSettings(STTSettings):
    """STTSettings with voxgate's key terms (phrase hints): a list of strings or
    voxgate_client.Phrase. Updating them mid-call replaces the session's hints from its next
    utterance on (no new session)."""

    keyterms: Any | NotGiven = field(default_factory=lambda: NOT_GIVEN)


def keyterm_phrases(settings: STTSettings) -> tuple[Phrase, ...]:
    """The settings' key terms as voxgate phrase hints (none when not given)."""
    keyterms = getattr(settings, "keyterms", ())
    return as_phrases(keyterms if isinstance(keyterms, (list, tuple)) else ())
