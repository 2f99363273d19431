"""The engine interface every sidecar engine implements (sphinx, fake, voxtral, ...).

Audio in: 16 kHz mono PCM16 chunks (engine_api.audio) with the service's VAD flag.
Out: the contract's outputs (engine_api.outputs): text deltas stamped with audio time, diagnostics, flush
acknowledgements and a final Closed. Outputs are pulled from a bounded queue, so an engine that is read
slowly stops accepting audio (backpressure).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

from engine_api.info import EngineInfo
from engine_api.outputs import EngineOutput
from engine_api.phrases import PhraseHint
from engine_api.status import EngineStatus


class EngineStartError(RuntimeError):
    """An engine cannot start for a reason its message names, with the fix (a missing or corrupted model):
    the sidecar prints the message as one line and exits, no traceback."""


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

    async def set_phrase_hints(self, hints: tuple[PhraseHint, ...]) -> None:
        """Favour these from the next utterance on: the one in progress, if any, keeps the hints it began with."""
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

    async def open_session(
        self, session_id: str, language_code: str, phrase_hints: tuple[PhraseHint, ...] = ()
    ) -> EngineSession:
        """A new session. `phrase_hints`: what the engine favours, if its info.phrase_hints says it can."""
        ...

    def counters(self) -> dict[str, int]: ...

    def status(self) -> EngineStatus:
        """Whether a new session is admitted now (a free slot aside: the sidecar counts those), and why not;
        the live sessions of an engine with a position clock."""
        ...

    async def shutdown(self) -> None: ...


@dataclass
class EngineCounters:
    """Counters every engine keeps; reported through the sidecar's status call."""

    sessions_total: int = 0
    sessions_active: int = 0
    extra: dict[str, int] = field(default_factory=dict)

    def opened(self) -> None:
        """A session was opened (its engine gives it back: sessions_active -= 1, once)."""
        self.sessions_total += 1
        self.sessions_active += 1

    def as_dict(self) -> dict[str, int]:
        return {"sessions_total": self.sessions_total, "sessions_active": self.sessions_active, **self.extra}
