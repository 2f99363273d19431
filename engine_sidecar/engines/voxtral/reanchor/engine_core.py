"""The EngineCore's two re-anchoring calls, added by the vLLM plugin (vllm_plugin.py) under new names: nothing
of vLLM's is overridden. The sidecar reaches them as EngineCore utility calls.

CONNECT_METHOD gives the scheduler its way to the workers: a `collective_rpc` of the worker extension's
`voxgate_rotate` (worker.py). collective_rpc reaches each worker after every step already handed to it, so a
shift handed over inside `schedule()` is applied after the last forward with the old positions and before
the first with the new ones, under either executor and either model runner.

POLL_METHOD is the tripwire's (tripwire.py): the shifts the scheduler issued since the last poll and every
worker rank's acknowledgements, in one call, so the comparison has no race.
"""

from __future__ import annotations

from typing import Any

from engine_sidecar.engines.voxtral.reanchor.shift import Shift
from engine_sidecar.engines.voxtral.reanchor.tripwire import Mailbox

CONNECT_METHOD = "voxgate_reanchor_connect"
POLL_METHOD = "voxgate_reanchor_poll"
ROTATE_METHOD = "voxgate_rotate"  # the worker extension's


def voxgate_reanchor_connect(self: Any) -> bool:
    """Connect the scheduler to the workers; False when the scheduler is not voxgate's (it never shifts)."""
    connect = getattr(self.scheduler, "voxgate_connect", None)
    if connect is None:
        return False

    def rotate(shifts: tuple[Shift, ...]) -> Any:
        return self.collective_rpc(ROTATE_METHOD, args=(shifts,))

    connect(rotate)
    return True


def voxgate_reanchor_poll(self: Any, tag_prefix: str | None = None) -> dict[str, Any]:
    drain = getattr(self.scheduler, "voxgate_issued", None)  # absent: a scheduler that never shifts
    issued = drain() if drain is not None else []
    ranks = list(self.collective_rpc("voxgate_reanchor_events"))
    if tag_prefix is None:  # the one front end: everything is its news
        return {"issued": issued, "ranks": ranks}
    box = self.__dict__.setdefault("_voxgate_mailbox", Mailbox())
    return box.exchange(issued, ranks, tag_prefix)


def install_core_calls(engine_core_cls: Any) -> None:
    """Add both calls to vLLM's EngineCore class; idempotent, never replaces an attribute of vLLM's."""
    for name, call in ((CONNECT_METHOD, voxgate_reanchor_connect), (POLL_METHOD, voxgate_reanchor_poll)):
        if getattr(engine_core_cls, name, None) is None:
            setattr(engine_core_cls, name, call)
