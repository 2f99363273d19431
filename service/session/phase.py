"""Where a session is between its start and its Ended response, and how it ends."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from .. import errors
from ..events import EndReason


class Phase(Enum):
    OPEN = "open"  # taking client input: from the attached stream, or waiting resume_window_s for one
    STOPPING = "stopping"  # told to stop taking input (drain, idle timeout): the attached stream ends it
    CLOSING = "closing"  # input has ended: the engine's last results are on their way
    ENDED = "ended"  # Ended is in the log; the session holds nothing

    @property
    def taking_input(self) -> bool:
        return self in (Phase.OPEN, Phase.STOPPING)


@dataclass(frozen=True)
class Ending:
    """What the Ended response will say, and the error the client's stream ends with (if any)."""

    reason: EndReason = EndReason.CLIENT_END
    message: str = ""
    error: errors.StreamError | None = None
