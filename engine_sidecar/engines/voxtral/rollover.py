"""When a session moves to a fresh engine request, so it never reaches max_model_len (stock vLLM would
silently stop feeding it there and drop the rest of its audio).

Behind a small interface: re-anchoring, which removes the cap, replaces this policy with one that
never rolls over.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class RolloverPolicy(Protocol):
    def split(self, request_samples: int, chunk_samples: int, speech: bool) -> int | None:
        """How many samples of this chunk still go to the current request before a rollover;
        None: the whole chunk goes there and no rollover is due."""
        ...


@dataclass(frozen=True)
class BudgetRollover:
    """Roll over at the first VAD silence once past `soft_samples`, and at `cap_samples` regardless."""

    cap_samples: int
    soft_samples: int

    @classmethod
    def for_cap(cls, cap_samples: int, silence_window_samples: int) -> BudgetRollover:
        # Search for silence at most in the second half of a request: short requests lose context.
        return cls(cap_samples, max(cap_samples - silence_window_samples, cap_samples // 2))

    def split(self, request_samples: int, chunk_samples: int, speech: bool) -> int | None:
        if request_samples >= self.soft_samples and not speech:
            return 0
        if request_samples + chunk_samples > self.cap_samples:
            return max(self.cap_samples - request_samples, 0)
        return None


@dataclass(frozen=True)
class NoRollover:
    """Re-anchoring keeps the position clock below max_model_len: a session stays on one request."""

    def split(self, request_samples: int, chunk_samples: int, speech: bool) -> int | None:
        return None
