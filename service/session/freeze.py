"""The freeze watch: speech was sent to the engine and nothing came back for freeze_timeout_s."""

from __future__ import annotations

from engine_sidecar.engine import Closed, Delta, Flushed

from ..clock import Clock
from .intake import Chunk


class Frozen(Exception):
    """The engine session stopped answering: reset it (a seam) and replay."""


class FreezeWatch:
    def __init__(self, clock: Clock, timeout_s: float) -> None:
        self._clock = clock
        self._timeout_s = timeout_s
        self._speech_sent_to_ms = 0  # session time up to which speech chunks were sent to the engine
        self.unanswered_since: float | None = None  # speech is out and the engine has not covered it

    def sent(self, chunk: Chunk) -> None:
        if chunk.speech:
            self._speech_sent_to_ms = max(self._speech_sent_to_ms, chunk.end_ms)
            if self.unanswered_since is None:
                self.unanswered_since = self._clock.monotonic()

    def answered(self, out: object) -> None:
        """Engine output: the clock restarts from now if speech sent is still beyond what it covers.
        An output that covers no audio (a diagnostic) says nothing about progress: the clock runs on."""
        covered = out.end_ms if isinstance(out, Delta) else out.audio_ms if isinstance(out, Flushed | Closed) \
            else None
        if covered is None:
            return
        self.unanswered_since = self._clock.monotonic() if self._speech_sent_to_ms > covered else None

    def disarm(self) -> None:
        self.unanswered_since = None

    def check(self) -> None:
        """Raise Frozen (once: the watch disarms) when speech has gone unanswered too long."""
        since = self.unanswered_since
        if since is not None and self._clock.monotonic() - since > self._timeout_s:
            self.unanswered_since = None
            raise Frozen(f"speech sent but no engine output for {self._timeout_s:.0f}s")
