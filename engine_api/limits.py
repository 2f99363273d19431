"""How a process states its flow-control bounds: one `Limit` per bound (service/limits.py,
engine_sidecar/engines/limits.py).

Like uvicorn's limit_concurrency / ws_max_queue, each bound is a number with a unit an operator can reason
about (milliseconds of audio, messages) and a stated consequence. docs/configuration.md's tuning table is generated
from these entries (scripts/gen_limits_table.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .audio import BYTES_PER_MS


class Unit(StrEnum):
    AUDIO_MS = "ms of audio"
    MESSAGES = "messages"
    BYTES = "bytes"  # of client audio or of a gRPC message; shown as ms of 16 kHz LINEAR16 too
    WALL_MS = "ms of wall time"
    SESSIONS = "sessions"


@dataclass(frozen=True)
class Limit:
    name: str  # what is bounded, for people
    value: int  # the bound (the default, where `setting` changes it)
    unit: Unit
    scope: str  # what one bound applies to: "per session", "per engine session", ...
    at_limit: str  # what happens when it is reached: backpressure, an error code, the oldest dropped
    setting: str = ""  # the flag or option that sets it; "": fixed

    @property
    def audio_ms(self) -> int | None:
        """The bound as audio time at the engine format (16 kHz PCM16); None for a count of messages."""
        if self.unit is Unit.AUDIO_MS:
            return self.value
        if self.unit is Unit.BYTES:
            return self.value // BYTES_PER_MS
        return None
