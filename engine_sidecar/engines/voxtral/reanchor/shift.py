"""One re-anchor event as the scheduler hands it to the workers (through collective_rpc: plain, picklable)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Shift:
    req_id: str  # vLLM's request id
    tag: str  # the front end's request id (for reporting)
    tokens: int  # D: every live position p becomes p - D
    blocks: tuple[tuple[int, ...], ...]  # live (non-null) block ids per KV-cache group, after the drop
    clock: int  # the session's computed tokens after the shift
    count: int = 1  # re-anchors of this request so far, this one included
    seq: int = 0  # the scheduler's serial number once issued to the workers; 0 while pending

    def then(self, later: Shift) -> Shift:
        """Two shifts of one request before the workers ran: rotate once by the sum, over the blocks still live."""
        return Shift(self.req_id, self.tag, self.tokens + later.tokens, later.blocks, later.clock, later.count)

    def record(self) -> dict[str, Any]:
        """The issued shift as the tripwire compares it with the workers' acknowledgements (plain data)."""
        return {"seq": self.seq, "req_id": self.req_id, "tag": self.tag, "tokens": self.tokens, "clock": self.clock}
