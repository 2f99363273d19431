"""What a session needs from the engine: a source that opens engine streams, and the streams.

The real ones are service.session.engine_link (a gRPC stream on the sidecar); tests use an
in-process fake (tests/session/harness.py). A session opens one stream, and a fresh one after
each seam (sidecar restart, frozen engine session).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from engine_api.info import InterimStability, PositionMode
from engine_api.outputs import EngineOutput
from engine_api.phrases import PhraseHint, PhraseHintSupport


class EngineUnavailable(Exception):
    """No engine is ready (starting, restarting, or down) within the wait allowed."""


class EngineFull(Exception):
    """The engine refused the session: no engine slot free."""


class EngineLost(Exception):
    """The stream broke: the sidecar died, restarted, or the channel closed."""


class EngineFailed(Exception):
    """The engine is alive but failed this session."""


@dataclass(frozen=True)
class StreamInfo:
    """What the engine said about itself when it opened the stream (sent to the client in SessionStarted)."""

    engine: str = ""
    model: str = ""
    position_mode: PositionMode = PositionMode.NONE
    position_mode_reason: str = ""
    interim_stability: InterimStability = InterimStability.NONE
    phrase_hints: PhraseHintSupport = PhraseHintSupport.NONE


class EngineStream(Protocol):
    """One open engine session. Outputs are in session time (the stream shifts the engine's clock)."""

    @property
    def info(self) -> StreamInfo: ...

    async def next_output(self) -> EngineOutput:
        """The next output; raises EngineLost or EngineFailed when the stream ends without Closed."""
        ...

    async def send_audio(self, pcm16: bytes, speech: bool) -> None:
        """Raises EngineLost (as the other sends do) when the stream is broken."""
        ...

    async def send_flush(self, marker: int) -> None: ...

    async def send_phrase_hints(self, hints: tuple[PhraseHint, ...]) -> None:
        """Replace the phrase hints, from the engine's next utterance on."""
        ...

    async def send_close(self) -> None: ...

    async def cancel(self) -> None:
        """Drop the engine session (the engine aborts it and frees its slot)."""
        ...


@dataclass(frozen=True)
class EngineRequest:
    """What a session's engine sessions are opened with."""

    session_id: str
    language: str
    phrase_hints: tuple[PhraseHint, ...] = ()


class EngineSource(Protocol):
    async def open(
        self, request: EngineRequest, base_ms: int, wait_s: float, failed: EngineStream | None = None
    ) -> EngineStream:
        """A stream whose session time starts at base_ms, on an engine ready within wait_s.

        `failed`: the stream that just broke, so that a stale engine is not handed out again.
        Raises EngineUnavailable, EngineFull or EngineLost.
        """
        ...
