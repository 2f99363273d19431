"""One front end of a shared engine core: which vLLM client it is (its process: process/frontend.py).

vLLM's multi-client mechanism (`vllm serve --api-server-count`): the supervisor binds one input/output
listener pair per client slot, launches the EngineCore with every slot's addresses, and each front-end
process builds `AsyncLLM(client_addresses=…, client_count=…, client_index=…)` on its slot. The engine core
sends each slot its one-time "ready" message when it starts, so a slot serves one front-end process only:
a replacement front end takes a spare slot (core_host.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine_api.frontends import FRONTEND_INDEX, FRONTENDS


@dataclass(frozen=True)
class FrontEndClient:
    index: int  # which front end, 0..count-1: its socket and its share of the engine
    count: int  # K, the front ends sharing the engine core
    slot: int  # the vLLM client index (slot) this process is; a replacement gets a fresh one
    slots: int  # client slots the engine core was launched with (K + spares): vLLM's client_count
    addresses: dict[str, Any] = field(repr=False)  # input/output addresses and the listeners bound for them
    orphan_slot: int | None = None  # the dead front end's slot this one replaces: its requests are aborted

    @property
    def request_prefix(self) -> str:
        """Of this front end's request ids: unique per slot, so re-anchor news reaches the right process."""
        return f"voxgate.c{self.slot}"

    def share(self, capacity: int) -> int:
        """This front end's part of an engine-wide capacity: static, exact in sum (lower indices take the rest)."""
        return capacity // self.count + (1 if self.index < capacity % self.count else 0)

    def counters(self) -> dict[str, int]:
        return {FRONTEND_INDEX: self.index, FRONTENDS: self.count, "frontend_client_slot": self.slot}


def frontend_socket(socket: str, index: int) -> str:
    """The Unix socket front end `index` serves on: the sidecar's own `--socket` for 0 (a client that knows
    only that path keeps working), `<socket>.<index>` otherwise."""
    if index < 0:
        raise ValueError("a front end index is >= 0")
    return socket if index == 0 else f"{socket}.{index}"


def frontend_sockets(socket: str, count: int) -> tuple[str, ...]:
    """Every front end's socket of a sidecar started with `frontends=count`, in index order."""
    return tuple(frontend_socket(socket, i) for i in range(max(1, count)))
