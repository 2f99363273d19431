"""How a stream with `resume=` reconnects: the policy (the behaviour is voxgate_client.resume's)."""

from __future__ import annotations

from dataclasses import dataclass

from .limits import UNACKED_AUDIO

__all__ = ["ResumePolicy"]

# A voxgate server's default resume window: assumed until a session tells its own.
DEFAULT_RESUME_WINDOW_S = 30.0


@dataclass(frozen=True)
class ResumePolicy:
    """How a stream with `resume=` reconnects.

    reconnect_window_s: how long one disconnect is retried (from its first
      failed attempt; reset once a reconnected stream delivers a response); then
      the last error is raised. None: as long as the server holds the session,
      its SessionStarted.resume_window (30 s on a default server), so a whole
      server restarting in that time loses nothing.
    max_attempts: also a cap on reconnects in a row for one disconnect; None: no
      cap but the window.
    backoff_s / max_backoff_s: the first delay between attempts, doubled each time up to the max.
    max_unacked_bytes: audio kept for resending; when the server's
      acknowledgements fall this far behind, no more audio is read from the
      iterable until they catch up (the same backpressure the server applies).
    flow_status_interval_ms: how often the server acknowledges audio.
    reconnect_on_drain: after SessionEnded{DRAINING} with audio still to send,
      open a new session (same config, same target: behind a balancer, another
      instance) and continue there; opening it is retried on UNAVAILABLE like a
      reconnect (a balancer may first pick the draining instance, which refuses
      with DRAINING). False: the stream ends with the drained session.
    restart_lost_sessions: when a resume finds no session although it had heard
      audio (SESSION_NOT_FOUND: the server process that held it died, e.g. a
      crashed worker of `voxgate serve --workers N`), open a new session and
      resend from the end of the last final result: the utterance in progress
      is transcribed again, so no final is lost or repeated. Audio from there
      is kept for this, at most max_unacked_bytes beyond the acknowledged.
      Not for channels recognized separately (they finalize at their own
      moments). False: the stream ends with the error.
    attached_wait_s: how long a resume refused with SESSION_ATTACHED is retried
      (backed off like a reconnect, not counted in the reconnects). The server
      holds the session for the old connection until it sees that one go: at
      once for a reset connection, after its keepalive fails (20 s + 10 s by
      default) for one that died silently.
    """

    reconnect_window_s: float | None = None
    max_attempts: int | None = None
    backoff_s: float = 0.2
    max_backoff_s: float = 5.0
    max_unacked_bytes: int = UNACKED_AUDIO.value
    flow_status_interval_ms: int = 200
    reconnect_on_drain: bool = True
    restart_lost_sessions: bool = True
    attached_wait_s: float = 60.0

    def __post_init__(self) -> None:
        if (self.max_attempts is not None and self.max_attempts < 1) or self.backoff_s < 0:
            raise ValueError("max_attempts >= 1 (or None) and backoff_s >= 0 are required")
        if self.max_unacked_bytes <= 0:
            raise ValueError("max_unacked_bytes > 0 is required")
        if self.reconnect_window_s is not None and self.reconnect_window_s < 0:
            raise ValueError("reconnect_window_s must be >= 0 (or None)")
        if self.flow_status_interval_ms <= 0:
            raise ValueError("flow_status_interval_ms must be positive")
        if self.attached_wait_s < 0:
            raise ValueError("attached_wait_s must be >= 0")

    def window_s(self, resume_window_s: float) -> float:
        """How long one disconnect is retried, given the server's resume window."""
        return resume_window_s if self.reconnect_window_s is None else self.reconnect_window_s

    def delay_s(self, tries: int) -> float:
        """The pause before attempt number `tries` (1, 2, ...): backoff_s doubled each time."""
        return min(self.backoff_s * 2.0 ** (tries - 1), self.max_backoff_s)
