"""Backoff between replacements of a dead front end (engine_api/restart_backoff.py; core_host.py, service/workers.py).

The policy on a fake clock; then CoreHost's supervision loop with real front-end processes that die right
after each start (as in a bad environment), without vLLM: only the process start is the test's.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import threading
import time
from typing import Any

import pytest
from structlog.testing import capture_logs

from engine_api.restart_backoff import BackoffPolicy, RestartBackoff
from engine_sidecar.engines.voxtral.engine import EXIT_ENGINE_DEAD
from engine_sidecar.engines.voxtral.frontend_client import FrontEndClient
from engine_sidecar.engines.voxtral.options import VoxtralOptions
from engine_sidecar.process.core_host import CoreHost


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_delays_double_to_the_cap_and_reset_after_a_stable_run() -> None:
    clock = FakeClock()
    backoff = RestartBackoff(BackoffPolicy(first_s=0.5, max_s=8.0, stable_s=60.0), clock)
    delays = []
    for _ in range(7):  # dies right after each start
        delays.append(backoff.next_delay())
        clock.now += delays[-1]
        backoff.started()
        clock.now += 0.1
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    clock.now += 59.0  # still short of a stable run since the last start
    assert backoff.next_delay() == 8.0
    backoff.started()
    clock.now += 60.0
    assert backoff.next_delay() == 0.5  # it had stayed up: a fresh failure
    backoff.started()
    assert backoff.next_delay() == 1.0  # and dies at once again


def test_a_nonsensical_policy_is_refused() -> None:
    for bad in ({"first_s": 2.0, "max_s": 1.0}, {"first_s": -1.0}, {"stable_s": -1.0}):
        with pytest.raises(ValueError):
            BackoffPolicy(**bad)


def _die() -> None:
    os._exit(3)


def _serve() -> None:
    time.sleep(60)


class ProcessHost(CoreHost):
    """CoreHost whose front ends are real processes running `target` instead of vLLM front ends."""

    def __init__(self, target: Any, frontends: int, spares: int, policy: BackoffPolicy) -> None:
        super().__init__(
            argparse.Namespace(socket="/unused"),
            VoxtralOptions(frontends=frontends, frontend_spares=spares),
            restart=policy,
        )
        self.target = target
        self.starts: list[tuple[float, int, int]] = []  # (when, index, slot)
        self._ctx = multiprocessing.get_context("fork")  # type: ignore[assignment]  # fast: no vLLM here

    def _start(self, index: int, slot: int, orphan: int | None) -> Any:
        target = self.target if index == 0 else _serve  # only front end 0 crash-loops
        proc = self._ctx.Process(target=target, name=f"front end {index}")
        proc.start()
        self._procs[index] = proc
        self._clients[index] = FrontEndClient(
            index=index, count=self._k, slot=slot, slots=self._slots, addresses={}, orphan_slot=orphan
        )
        self.starts.append((time.monotonic(), index, slot))
        return None


def test_a_crash_looping_front_end_is_replaced_with_backoff_until_the_spares_run_out() -> None:
    policy = BackoffPolicy(first_s=0.1, max_s=0.25, stable_s=60.0)
    host = ProcessHost(_die, frontends=2, spares=3, policy=policy)
    for i in range(2):
        host._start(i, slot=i, orphan=None)
    with capture_logs() as logs:
        assert host._supervise() == EXIT_ENGINE_DEAD
    starts = [(when, slot) for when, index, slot in host.starts if index == 0]
    assert [slot for _, slot in starts] == [0, 2, 3, 4]  # each replacement on the next spare slot
    gaps = [later - earlier for (earlier, _), (later, _) in zip(starts, starts[1:], strict=False)]
    assert all(gap >= delay for gap, delay in zip(gaps, [0.1, 0.2, 0.25], strict=True)), gaps
    died = [e for e in logs if e["event"] == "frontend_died"]
    assert [e["restart_in_s"] for e in died] == [0.1, 0.2, 0.25]
    assert [e["event"] for e in logs if e["log_level"] == "critical"] == ["frontend_spares_exhausted"]
    assert len([i for _, i, _ in host.starts if i == 1]) == 1  # the other front end kept serving throughout


def test_a_pending_replacement_does_not_hold_up_a_stop() -> None:
    host = ProcessHost(_die, frontends=1, spares=1, policy=BackoffPolicy(first_s=30.0, max_s=30.0))
    host._start(0, slot=0, orphan=None)
    threading.Timer(0.3, lambda: setattr(host, "_stop", True)).start()  # SIGTERM's handler sets the flag
    began = time.monotonic()
    assert host._supervise() == 0
    assert time.monotonic() - began < 2.0  # not the 30 s backoff
    assert len(host.starts) == 1
