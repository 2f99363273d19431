"""The freeze watch: the engine was given audio and has not taken it in for freeze_timeout_s.

The engine is judged by whether it consumes the audio it is given, not by whether
it has spoken: a healthy engine holds its last words until more audio comes
(PocketSphinx's settle time, Voxtral's transcription delay), so a client's pause
(keep_alives, a quiet or half-open client) is not a freeze. Engines report the
audio they have taken in (Progress, every PROGRESS_EVERY_MS); text, flush
acknowledgements and Closed say as much. The engine owes an answer while audio
sent to it is beyond what it reported by more than SLACK_MS (two reporting steps),
and from the moment it is told to close until Closed.
"""

from __future__ import annotations

from engine_api.outputs import PROGRESS_EVERY_MS, Closed, Delta, Flushed, Progress

from ..clock import Clock
from .intake import Chunk

SLACK_MS = 2 * PROGRESS_EVERY_MS  # audio an engine may have taken in without having reported it yet


class Frozen(Exception):
    """The engine session stopped taking in audio: reset it (a seam) and replay."""


class FreezeWatch:
    def __init__(self, clock: Clock, timeout_s: float) -> None:
        self._clock = clock
        self._timeout_s = timeout_s
        self._sent_ms = 0  # session time up to which audio was handed to the engine
        self._taken_ms = 0  # session time up to which the engine says it has taken audio in
        self._closing = False  # told to close: Closed is owed
        self.unanswered_since: float | None = None  # the engine owes an answer, and has given none since

    def restart(self, base_ms: int) -> None:
        """A fresh engine session whose audio starts at base_ms: it owes nothing yet."""
        self._sent_ms = self._taken_ms = base_ms
        self._closing = False
        self.unanswered_since = None

    def sent(self, chunk: Chunk) -> None:
        self._sent_ms = max(self._sent_ms, chunk.end_ms)
        self._arm()

    def close_sent(self) -> None:
        self._closing = True
        self._arm()

    def answered(self, out: object) -> None:
        """Engine output: the clock restarts from now if the engine still owes something.
        An output that covers no audio (a diagnostic) says nothing about progress: the clock runs on."""
        taken = (
            out.end_ms
            if isinstance(out, Delta)
            else out.audio_ms
            if isinstance(out, Flushed | Closed | Progress)
            else None
        )
        if taken is None:
            return
        if isinstance(out, Closed):
            self._closing = False
        self._taken_ms = max(self._taken_ms, taken)
        self.unanswered_since = self._clock.monotonic() if self._owed() else None

    def disarm(self) -> None:
        self.unanswered_since = None

    def deadline(self) -> float | None:
        """The clock time at which the engine, owing an answer, is frozen (None: it owes nothing)."""
        return None if self.unanswered_since is None else self.unanswered_since + self._timeout_s

    def check(self) -> None:
        """Raise Frozen (once: the watch disarms) when the engine has owed an answer too long."""
        deadline = self.deadline()
        if deadline is not None and self._clock.monotonic() >= deadline:
            self.unanswered_since = None
            raise Frozen(f"audio sent but not taken in by the engine for {self._timeout_s:.0f}s")

    def _owed(self) -> bool:
        return self._closing or self._sent_ms - self._taken_ms > SLACK_MS

    def _arm(self) -> None:
        if self.unanswered_since is None and self._owed():
            self.unanswered_since = self._clock.monotonic()
