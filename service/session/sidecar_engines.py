"""Where a session's engine streams come from: the engine the pool picks, on its frames socket.

A session may use several links in a row (after a sidecar restart, or a reset of a frozen engine session);
each is opened here, on the best ready engine, the next one when one refuses or is gone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from engine_api.v1 import engine_pb2_grpc

from .engine_link import EngineLink
from .engine_source import EngineFull, EngineLost, EngineRequest, EngineStream, EngineUnavailable

OPEN_TIMEOUT_S = 30.0


class EnginePicker(Protocol):
    """The engines a session may open on (service/engine_pool.py): one sidecar, or several."""

    async def pick(
        self, wait_s: float, failed: engine_pb2_grpc.EngineStub | None = None
    ) -> list[engine_pb2_grpc.EngineStub]:
        """Stubs of ready engines to try, best first; empty when none is ready within wait_s. `failed`: the
        stub whose stream just broke: its engine is left out while another is ready, else given a moment to be
        noticed dead (as a lone sidecar is)."""
        ...

    def place(self, stub: engine_pb2_grpc.EngineStub, link: EngineLink) -> None:
        """A session's stream is opening on that engine: placement counts it from now on, while it lasts (so
        that a burst of opens spreads before any of them has answered)."""
        ...

    def opened(self, stub: engine_pb2_grpc.EngineStub, link: EngineLink) -> None:
        """The engine opened it."""
        ...

    def frames_socket(self, stub: engine_pb2_grpc.EngineStub) -> Path | None:
        """That engine's frames socket (engine_api/frames.py); None when it is not one this service may use."""
        ...


class SidecarEngines:
    """Opens EngineLinks on an engine the pool picks: the best first, the next when one refuses or is gone."""

    def __init__(self, engines: EnginePicker) -> None:
        self._engines = engines

    async def open(
        self, request: EngineRequest, base_ms: int, wait_s: float, failed: EngineStream | None = None
    ) -> EngineLink:
        stale = failed.stub if isinstance(failed, EngineLink) else None
        stubs = await self._engines.pick(wait_s, stale)
        if not stubs:
            raise EngineUnavailable("speech engine is starting or restarting")
        for n, stub in enumerate(stubs, 1):
            link = self._link(stub, request, base_ms)
            self._engines.place(stub, link)
            try:
                await link.open(OPEN_TIMEOUT_S)
            except (EngineFull, EngineLost):
                if n == len(stubs):
                    raise  # the last engine's answer is the session's
                continue
            self._engines.opened(stub, link)
            return link
        raise AssertionError("not reached")  # the loop returns or raises

    def _link(self, stub: engine_pb2_grpc.EngineStub, request: EngineRequest, base_ms: int) -> EngineLink:
        path = self._engines.frames_socket(stub)
        if path is None:  # gone, or not private to this user (the supervisor logged why): as a lost engine
            raise EngineLost("engine frames socket missing or not private")
        return EngineLink(stub, path, request, base_ms)
