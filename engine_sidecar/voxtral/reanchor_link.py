"""The sidecar's end of re-anchoring: arm the extension inside vLLM, then relay its events to sessions.

Events happen in the EngineCore's worker; the sidecar polls them (a collective_rpc every
POLL_S while re-anchoring sessions exist) and hands each to the session whose request it
shifted, which reports it as a diagnostic. Polling is a few microseconds of engine time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import structlog

from ..engine import EngineCounters
from ..reanchor.frontend import uncap_realtime_buffer

log = structlog.get_logger("voxtral")
POLL_S = 0.5


@dataclass(frozen=True)
class PositionMode:
    """How a session's position clock stays below max_model_len."""

    name: str  # "reanchor" | "rollover"
    reason: str = ""  # why not re-anchoring, when rollover

    REANCHOR: ClassVar[PositionMode]

    @property
    def reanchor(self) -> bool:
        return self.name == "reanchor"

    @classmethod
    def rollover(cls, reason: str) -> PositionMode:
        return cls("rollover", reason)


PositionMode.REANCHOR = PositionMode("reanchor")

# An event as the worker reports it: tag (our request id), tokens, clock, count, rotate_ms.
ReanchorEvent = dict[str, Any]


class ReanchorLink:
    def __init__(self, counters: EngineCounters) -> None:
        self.listeners: dict[str, Callable[[ReanchorEvent], None]] = {}
        self._counters = counters
        self._poller: asyncio.Task[None] | None = None

    async def arm(self, llm: Any, wanted: bool) -> list[str]:
        """Run the worker-side set-up (guards, layout probes, exact tables); the reasons it failed, if any."""
        reports = await llm.collective_rpc("voxgate_reanchor_setup")
        problems = [str(r.get("reason") or "worker set-up failed") for r in reports if not r.get("ok")]
        if wanted and not problems:
            try:
                uncap_realtime_buffer()
            except RuntimeError as exc:
                problems.append(str(exc))
        if not problems:
            layers = reports[0].get("layers", [])
            log.info("reanchor_armed", layers=len(layers), windows=reports[0].get("windows"),
                     block_sizes=reports[0].get("block_sizes"), exact_rope_tables=reports[0].get("exact_rope_tables"),
                     runtime=reports[0].get("runtime"),
                     layouts=sorted({f"{x.get('kind')} {x.get('dtype')} {x.get('layout')}" for x in layers}))
        return problems

    def start_polling(self, llm: Any, counters: EngineCounters) -> None:
        self._poller = asyncio.create_task(self._poll(llm))

    async def stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._poller

    async def _poll(self, llm: Any) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            if not self.listeners or llm.errored:
                continue
            await self.poll_once(llm)

    async def poll_once(self, llm: Any) -> None:
        try:
            (report, *_) = await llm.collective_rpc("voxgate_reanchor_events")
        except Exception as exc:  # the engine's death is the engine monitor's business
            log.debug("reanchor_poll_failed", error=repr(exc))
            return
        for event in report["events"]:
            self._counters.extra["reanchors"] = self._counters.extra.get("reanchors", 0) + 1
            listener = self.listeners.get(event["tag"])
            if listener is not None:
                listener(event)
