"""A session's clocks: the resume window, the idle timeout (a warning first), FlowStatus reports.

Pure bookkeeping on an injected clock; the session ticks it and acts on what is due.
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
    def __init__(self, clock: Clock, idle_timeout_s: float, resume_window_s: float,
                 flow_interval_s: float | None) -> None:
        self._clock = clock
        self._idle_timeout_s = idle_timeout_s
        self._resume_window_s = resume_window_s
        self._flow_interval_s = flow_interval_s
        self._last_activity = clock.monotonic()
        self._idle_warned = False
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

    def tick(self, holding_client_back: bool) -> Due:
        """What is due now. While detached only the resume window runs; while the session holds the
        client back (flow control) the client is not idle."""
        now = self._clock.monotonic()
        if self._detached_at is not None:
            return Due(resume_window_passed=now - self._detached_at > self._resume_window_s)
        if holding_client_back:
            self._last_activity = now
        idle = now - self._last_activity
        timeout = idle > self._idle_timeout_s
        warning = None
        if not timeout and idle > self._idle_timeout_s * 0.5 and not self._idle_warned:
            self._idle_warned = True
            warning = idle
        flow = bool(self._flow_interval_s) and now >= self._next_flow
        if flow and self._flow_interval_s:
            self._next_flow = now + self._flow_interval_s
        return Due(idle_timeout=timeout, idle_warning_after_s=warning, flow_report=flow)
