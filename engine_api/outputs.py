"""What an engine session says: text deltas stamped with audio time, diagnostics, flush acknowledgements,
progress and a final Closed (SessionOutput on the wire; engine_api.wire converts).

An utterance (the audio between two flushes) is told in deltas that only append; an engine whose info says
InterimStability.REVISABLE may end an utterance with a Revision, its own final hypothesis, which replaces them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True)
class Delta:
    """Text to append (a leading space starts a word) and the audio span it describes."""

    text: str
    start_ms: int
    end_ms: int
    token_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Revision:
    """The engine's own final hypothesis for the utterance the next Flushed (or Closed) ends.

    Its deltas replace every Delta sent since the previous Flushed. Only InterimStability.REVISABLE engines send
    it, and only right before that Flushed or Closed.
    """

    deltas: tuple[Delta, ...]


class DiagnosticKind(StrEnum):
    """What a Diagnostic reports. The values are the names the sessions' warnings and metrics use."""

    WARNING = "warning"
    ROLLOVER = "rollover"  # the session moved to a fresh engine request (position budget)
    REANCHOR = "reanchor"  # the position clock was shifted down in place
    RUT_RECOVERY = "rut_recovery"  # a blank-token rut over speech: engine request restarted
    FREEZE_RECOVERY = "freeze_recovery"  # no output while audio was fed: engine request restarted
    REANCHOR_FAILED = "reanchor_failed"  # a shift not applied by every worker: re-anchoring ends for the session


@dataclass(frozen=True)
class Diagnostic:
    kind: DiagnosticKind
    message: str
    at_ms: int


@dataclass(frozen=True)
class Flushed:
    marker: int
    audio_ms: int


@dataclass(frozen=True)
class Closed:
    audio_ms: int


@dataclass(frozen=True)
class Progress:
    """The engine has taken in the session's audio up to audio_ms: whatever it has not yet said about that
    audio waits for more audio, a flush or close, not for the engine. Engines report it whenever it has
    advanced PROGRESS_EVERY_MS since their last report, so a watcher can tell a pause (the engine holds its
    last words until more audio comes) from a frozen engine (audio it was given is not taken in)."""

    audio_ms: int


PROGRESS_EVERY_MS = 500

EngineOutput = Delta | Revision | Diagnostic | Flushed | Closed | Progress
