"""What an engine says about itself once started (EngineInfo; Opened and GetStatusResponse on the wire)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .phrases import PhraseHintSupport


class InterimStability(StrEnum):
    """Whether an engine's interim text may be revised by its final (the wire carries the value)."""

    NONE = ""  # not reported (an older sidecar)
    APPEND_ONLY = "append_only"  # an utterance's deltas are its final text
    REVISABLE = "revisable"  # the engine may end an utterance with a Revision

    @classmethod
    def from_wire(cls, value: str) -> InterimStability:
        """The stability a wire string names; NONE for one this side does not know."""
        try:
            return cls(value)
        except ValueError:
            return cls.NONE


class PositionMode(StrEnum):
    """How an engine's sessions keep their position clock below its cap (the wire carries the value)."""

    NONE = ""  # an engine without a position clock
    REANCHOR = "reanchor"  # positions shifted down in place; one engine request per session
    ROLLOVER = "rollover"  # a session moves to a fresh engine request before the cap (a seam)

    @classmethod
    def from_wire(cls, value: str) -> PositionMode:
        """The mode a wire string names; NONE for one this side does not know."""
        try:
            return cls(value)
        except ValueError:
            return cls.NONE


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
        head = (
            f"runner {self.model_runner}, async scheduling {'on' if self.async_scheduling else 'off'}, "
            f"kv cache dtype {self.kv_cache_dtype}"
        )
        groups = [
            f"group {i} ({g.kind or '?'}, block {g.block_size}, window {g.window}): "
            f"{g.attention_backend or '?'}, {g.dtype or '?'}, keys {g.key_layout or 'not probed'}"
            for i, g in enumerate(self.kv_groups)
        ]
        return "; ".join([head, *groups])


@dataclass(frozen=True)
class EngineInfo:
    name: str
    model: str
    max_sessions: int
    languages: tuple[str, ...]
    frame_ms: int = 0
    transcription_delay_ms: int = 0
    position_mode: PositionMode = PositionMode.NONE
    position_mode_reason: str = ""  # why not re-anchoring
    position_runtime: PositionRuntime | None = None  # engines with a position clock, once started
    interim_stability: InterimStability = InterimStability.APPEND_ONLY
    phrase_hints: PhraseHintSupport = PhraseHintSupport.NONE
