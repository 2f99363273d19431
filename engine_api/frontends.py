"""Several front ends on one engine: where each serves, and how its status says which one it is.

A voxtral sidecar started with the engine option `frontends=K` (K > 1) runs one vLLM engine core and K
front-end processes, each its own AsyncLLM client of that core (vLLM's multi-client mechanism, as
`vllm serve --api-server-count K` uses). Front end 0 serves on the sidecar's `--socket` itself (so a
client that knows only that path keeps working); front end i > 0 on `<socket>.<i>`. Each answers
GetStatus with its own sessions, its share of the engine's capacity and, in its counters, FRONTEND_INDEX
and FRONTENDS (absent from a sidecar with one front end).
"""

from __future__ import annotations

from collections.abc import Mapping

FRONTEND_INDEX = "frontend_index"  # GetStatus counter: this front end's index, 0..K-1
FRONTENDS = "frontends"  # GetStatus counter: K, the front ends sharing this engine core


def frontend_socket(socket: str, index: int) -> str:
    """The Unix socket front end `index` serves on: the sidecar's own for 0, `<socket>.<index>` otherwise."""
    if index < 0:
        raise ValueError("a front end index is >= 0")
    return socket if index == 0 else f"{socket}.{index}"


def frontend_sockets(socket: str, count: int) -> tuple[str, ...]:
    """Every front end's socket of a sidecar started with `frontends=count`, in index order."""
    return tuple(frontend_socket(socket, i) for i in range(max(1, count)))


def frontend_of(counters: Mapping[str, int]) -> tuple[int, int]:
    """(index, K) from a GetStatus's counters; (0, 1) for a sidecar with a single front end."""
    return int(counters.get(FRONTEND_INDEX, 0)), int(counters.get(FRONTENDS, 1))
