"""Several front ends on one engine: how each one's status says which one it is.

A sidecar may serve one engine core through K front-end processes (voxtral's `frontends=K`), each on a
socket of its own. Each answers GetStatus with its own sessions, its share of the engine's capacity, every
front end's socket (`frontend_sockets`, in index order) and, in its counters, FRONTEND_INDEX and FRONTENDS
(absent from a sidecar with one front end).
"""

from __future__ import annotations

from collections.abc import Mapping

FRONTEND_INDEX = "frontend_index"  # GetStatus counter: this front end's index, 0..K-1
FRONTENDS = "frontends"  # GetStatus counter: K, the front ends sharing this engine core


def frontend_of(counters: Mapping[str, int]) -> tuple[int, int]:
    """(index, K) from a GetStatus's counters; (0, 1) for a sidecar with a single front end."""
    return int(counters.get(FRONTEND_INDEX, 0)), int(counters.get(FRONTENDS, 1))
