"""What an engine says about itself at each status call, besides its EngineInfo (GetStatusResponse)."""

from __future__ import annotations

from dataclasses import dataclass

from .info import PositionMode


@dataclass(frozen=True)
class SessionStat:
    """A live session as an engine with a position clock reports it (sidecar status)."""

    session_id: str
    audio_ms: int
    reanchors: int
    clock: int  # current position clock, in tokens
    position_mode: PositionMode


@dataclass(frozen=True)
class EngineStatus:
    """The engine's own say on admission now, and its live sessions.

    `admitting`: the engine takes a new session, a free slot aside (that is the sidecar's count): voxtral
    refuses while a live session lags real time. Engines without such a limit always admit.
    """

    admitting: bool = True
    refusal: str = ""  # why not, when not admitting
    sessions: tuple[SessionStat, ...] = ()

    @classmethod
    def from_refusal(cls, refusal: str | None, sessions: tuple[SessionStat, ...] = ()) -> EngineStatus:
        """Admitting unless there is a refusal (a reason why not)."""
        return cls(admitting=not refusal, refusal=refusal or "", sessions=sessions)
