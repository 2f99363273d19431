"""The engine contract every sidecar engine implements (sphinx, fake, voxtral, ...).

Audio in: 16 kHz mono PCM16 chunks with the service's VAD flag.
Out: text deltas stamped with audio time, diagnostics, flush acknowledgements
and a final Closed. An utterance (the audio between two flushes) is told in
deltas that only append; an engine whose info says INTERIM_REVISABLE may end an
utterance with a Revision, its own final hypothesis, which replaces them. Outputs are pulled from a bounded queue,
so an engine that is read slowly stops accepting audio (backpressure).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

SAMPLE_RATE_HZ = 16000
BYTES_PER_MS = SAMPLE_RATE_HZ * 2 // 1000


@dataclass(frozen=True)
class KvGroupRuntime:
    """One KV-cache group as the engine's workers found it at start-up."""

    kind: str  # "decoder" | "encoder"
    block_size: int
    window: int  # tokens; 0: full attention
    attention_backend: str
    key_layout: str  # the probed layout; "" when no probe ran
    dtype: str


@dataclass(frozen=True)
class PositionRuntime:
    """What an engine's position-clock machinery runs on (re-anchoring armed or refused)."""

    model_runner: str
    async_scheduling: bool
    kv_cache_dtype: str
    kv_groups: tuple[KvGroupRuntime, ...] = ()

    def describe(self) -> str:
        """One line: 'runner X, async scheduling off, kv cache dtype auto; group 0 (decoder, block 128, ...'."""
        head = (f"runner {self.model_runner}, async scheduling {'on' if self.async_scheduling else 'off'}, "
                f"kv cache dtype {self.kv_cache_dtype}")
        groups = [f"group {i} ({g.kind or '?'}, block {g.block_size}, window {g.window}): "
                  f"{g.attention_backend or '?'}, {g.dtype or '?'}, keys {g.key_layout or 'not probed'}"
                  for i, g in enumerate(self.kv_groups)]
        return "; ".join([head, *groups])


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
    position_runtime: PositionRuntime | None = None  # engines with a position clock, once started
    interim_stability: str = "append_only"  # INTERIM_APPEND_ONLY | INTERIM_REVISABLE


@dataclass(frozen=True)
class Delta:
    """Text to append (a leading space starts a word) and the audio span it describes."""

    text: str
    start_ms: int
    end_ms: int
    token_ids: tuple[int, ...] = ()


INTERIM_APPEND_ONLY = "append_only"  # an utterance's deltas are its final text
INTERIM_REVISABLE = "revisable"  # the engine may end an utterance with a Revision


@dataclass(frozen=True)
class Revision:
    """The engine's own final hypothesis for the utterance the next Flushed (or Closed) ends.

    Its deltas replace every Delta sent since the previous Flushed. Only INTERIM_REVISABLE engines send
    it, and only right before that Flushed or Closed.
    """

    deltas: tuple[Delta, ...]


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

EngineOutput = Delta | Revision | Diagnostic | Flushed | Closed | Progress


class EngineSession(Protocol):
    """One live session. Calls come from one task; outputs() is read by another."""

    def outputs(self) -> AsyncIterator[EngineOutput]:
        """Every output of the session; ends after Closed."""
        ...

    async def push_audio(self, pcm16: bytes, speech: bool) -> None:
        """Feed audio; may wait while the engine is behind (backpressure)."""
        ...

    async def flush(self, marker: int) -> None:
        """End the utterance: every delta for the audio pushed so far (or a Revision), then Flushed(marker)."""
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
