"""EngineCore utility calls for several front ends on one engine core (process/core_host.py).

Installed by the vLLM general plugin (vllm_plugin.py) in every vLLM process; only the EngineCore uses it.
A front end that dies leaves its streaming requests parked in the scheduler, holding KV blocks (vLLM never
hears that the client is gone). Its replacement calls ABORT_CLIENT_METHOD with the dead one's client slot
before it admits anything, so the engine's capacity comes back.
"""

from __future__ import annotations

from typing import Any

ABORT_CLIENT_METHOD = "voxgate_abort_client"  # a new name on EngineCore: nothing of vLLM's overridden


def install_abort_client(engine_core_cls: Any) -> None:
    """Give vLLM's EngineCore class the utility call; idempotent."""
    if getattr(engine_core_cls, ABORT_CLIENT_METHOD, None) is not None:
        return

    def voxgate_abort_client(self: Any, client_index: int) -> int:
        """Abort every request of one client slot; how many there were."""
        ids = [rid for rid, req in self.scheduler.requests.items() if req.client_index == client_index]
        if ids:
            self.abort_requests(ids)
        return len(ids)

    setattr(engine_core_cls, ABORT_CLIENT_METHOD, voxgate_abort_client)
