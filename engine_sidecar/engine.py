"""The engine contract every sidecar engine implements (sphinx, fake, voxtral, ...).

Audio in: 16 kHz mono PCM16 chunks with the service's VAD flag.
Out: append-only text deltas stamped with audio time, diagnostics, flush
acknowledgements and a final Closed. Outputs are pulled from a bounded queue,
so an engine that is read slowly stops accepting audio (backpressure).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

SAMPLE_RATE_HZ = 16000
BYTES_PER_MS = SAMPLE_RATE_HZ * 2 // 1000


@dataclass(frozen=True)
class EngineInfo:
    name: str
    model: str
    max_sessions: int
    languages: tuple[str, ...]
    frame_ms: int = 0
    transcription_delay_ms: int = 0
    position_mode: str = ""  # "reanchor" | "rollover" for engines with a position clock; "" otherwise
    position_mode_reason: str = ""  # why not re-anchoring


@dataclass(frozen=True)
class Delta:
    """Text to append (a leading space starts a word) and the audio span it describes."""

    text: str
    start_ms: int
    end_ms: int
    token_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Diagnostic:
    kind: str  # "warning" | "rollover" | "reanchor" | "rut_recovery" | "freeze_recovery"
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

EngineOutput = Delta | Diagnostic | Flushed | Closed | Progress


class EngineSession(Protocol):
    """One live session. Calls come from one task; outputs() is read by another."""

    def outputs(self) -> AsyncIterator[EngineOutput]:
        """Every output of the session; ends after Closed."""
        ...

    async def push_audio(self, pcm16: bytes, speech: bool) -> None:
        """Feed audio; may wait while the engine is behind (backpressure)."""
        ...

    async def flush(self, marker: int) -> None:
        """Emit every delta for the audio pushed so far, then Flushed(marker)."""
        ...

    async def close(self) -> None:
        """End of input: flush, emit Closed, end outputs()."""
        ...

    async def abort(self) -> None:
        """The client is gone: release everything now; outputs() may stop early."""
        ...


class Engine(Protocol):
    info: EngineInfo

    async def start(self) -> None: ...

    async def open_session(self, session_id: str, language_code: str) -> EngineSession: ...

    def counters(self) -> dict[str, int]: ...

    async def shutdown(self) -> None: ...


@dataclass(frozen=True)
class SessionStat:
    """A live session as an engine with a position clock reports it (sidecar status)."""

    session_id: str
    audio_ms: int
    reanchors: int
    clock: int  # current position clock, in tokens
    position_mode: str


@dataclass
class EngineCounters:
    """Counters every engine keeps; reported through the sidecar's status call."""

    sessions_total: int = 0
    sessions_active: int = 0
    extra: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, int]:
        return {"sessions_total": self.sessions_total, "sessions_active": self.sessions_active, **self.extra}
