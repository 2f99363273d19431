"""How a stream with `resume=` reconnects: the policy (the behaviour is voxgate_client.resume's)."""

from __future__ import annotations

from dataclasses import dataclass

from .limits import UNACKED_AUDIO

__all__ = ["ResumePolicy"]


@dataclass(frozen=True)
class ResumePolicy:
    """How a stream with `resume=` reconnects.

    max_attempts: reconnects tried in a row for one disconnect (reset once a
      reconnected stream delivers a response); then the last error is raised.
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
      (backed off like a reconnect, not counted in max_attempts). The server
      holds the session for the old connection until it sees that one go: at
      once for a reset connection, after its keepalive fails (20 s + 10 s by
      default) for one that died silently.
    """

    max_attempts: int = 5
    backoff_s: float = 0.2
    max_backoff_s: float = 5.0
    max_unacked_bytes: int = UNACKED_AUDIO.value
    flow_status_interval_ms: int = 200
    reconnect_on_drain: bool = True
    restart_lost_sessions: bool = True
    attached_wait_s: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.backoff_s < 0 or self.max_unacked_bytes <= 0:
            raise ValueError(
                "max_attempts >= 1, backoff_s >= 0 and max_unacked_bytes > 0 are required"
            )
        if self.flow_status_interval_ms <= 0:
            raise ValueError("flow_status_interval_ms must be positive")
        if self.attached_wait_s < 0:
            raise ValueError("attached_wait_s must be >= 0")

    def delay_s(self, tries: int) -> float:
        """The pause before attempt number `tries` (1, 2, ...): backoff_s doubled each time."""
        return min(self.backoff_s * 2.0 ** (tries - 1), self.max_backoff_s)
