"""A session's client-facing clocks: the resume window, the idle timeout (a warning first), FlowStatus reports.

Pure bookkeeping on an injected clock: `next_due_at` says when something next falls due, `due` what
is due now; the session sets an alarm for the one and acts on the other.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..clock import Clock


@dataclass(frozen=True)
class Due:
    resume_window_passed: bool = False  # detached for longer than the window: the session ends
    idle_timeout: bool = False
    idle_warning_after_s: float | None = None  # idle this long: warn (once per idle spell)
    flow_report: bool = False


class SessionTimers:
    def __init__(
        self, clock: Clock, idle_timeout_s: float, resume_window_s: float, flow_interval_s: float | None
    ) -> None:
        self._clock = clock
        self._idle_timeout_s = idle_timeout_s
        self._resume_window_s = resume_window_s
        self._flow_interval_s = flow_interval_s or None
        self._last_activity = clock.monotonic()
        self._idle_warned = False
        self._held_back = False
        self._detached_at: float | None = None
        self._next_flow = clock.monotonic()

    def activity(self) -> None:
        """The client sent something (audio, a keep-alive, ...): it is not idle."""
        self._last_activity = self._clock.monotonic()
        self._idle_warned = False

    def attached(self) -> None:
        self._detached_at = None
        self._last_activity = self._clock.monotonic()

    def detached(self) -> None:
        self._detached_at = self._clock.monotonic()

    def held_back(self, held: bool) -> None:
        """The session is (or no longer is) holding the client back (flow control): meanwhile it is not idle."""
        self._held_back = held
        self._last_activity = self._clock.monotonic()

    def next_due_at(self) -> float | None:
        """The clock time at which `due` next has something to say (None: nothing until the state changes)."""
        if self._detached_at is not None:
            return self._detached_at + self._resume_window_s
        times = [self._next_flow] if self._flow_interval_s else []
        if not self._held_back:
            times.append(self._idle_deadline() if self._idle_warned else self._warning_deadline())
        return min(times, default=None)

    def due(self) -> Due:
        """What is due now; a warning or a report said here is not said again. While detached only the
        resume window runs."""
        now = self._clock.monotonic()
        if self._detached_at is not None:
            return Due(resume_window_passed=now >= self._detached_at + self._resume_window_s)
        if self._held_back:
            self._last_activity = now
        timeout = now >= self._idle_deadline()
        warning = None
        if not timeout and now >= self._warning_deadline() and not self._idle_warned:
            self._idle_warned = True
            warning = now - self._last_activity
        flow = self._flow_interval_s is not None and now >= self._next_flow
        if flow and self._flow_interval_s:
            self._next_flow = now + self._flow_interval_s
        return Due(idle_timeout=timeout, idle_warning_after_s=warning, flow_report=flow)

    def _idle_deadline(self) -> float:
        return self._last_activity + self._idle_timeout_s

    def _warning_deadline(self) -> float:
        return self._last_activity + self._idle_timeout_s * 0.5
