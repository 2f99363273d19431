"""The sidecar's end of re-anchoring: arm the extension inside vLLM, then relay its events to sessions.

Events happen in the EngineCore's workers; the sidecar polls them (one EngineCore utility call every
POLL_S while re-anchoring sessions exist: the shifts the scheduler issued and every worker rank's
acknowledgements, see reanchor/tripwire.py) and hands each to the session whose request it shifted,
which reports it as a diagnostic. A shift some rank did not acknowledge ends that session's
re-anchoring: log line, counter, and the session's own diagnostic and rollover. Polling is a few
microseconds of engine time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import structlog

from engine_api.info import KvGroupRuntime, PositionMode, PositionRuntime
from engine_sidecar.engines.engine import EngineCounters
from engine_sidecar.engines.voxtral.reanchor.engine_core import CONNECT_METHOD, POLL_METHOD
from engine_sidecar.engines.voxtral.reanchor.frontend import uncap_realtime_buffer
from engine_sidecar.engines.voxtral.reanchor.tripwire import Unacknowledged, check

log = structlog.get_logger("voxtral")
POLL_S = 0.5


@dataclass(frozen=True)
class PositionChoice:
    """How a session's position clock stays below max_model_len, and why not by re-anchoring."""

    mode: PositionMode  # REANCHOR | ROLLOVER
    reason: str = ""  # why not re-anchoring, when rollover

    REANCHOR: ClassVar[PositionChoice]

    @property
    def reanchor(self) -> bool:
        return self.mode is PositionMode.REANCHOR

    @classmethod
    def rollover(cls, reason: str) -> PositionChoice:
        return cls(PositionMode.ROLLOVER, reason)


PositionChoice.REANCHOR = PositionChoice(PositionMode.REANCHOR)

# An event as the worker reports it: tag (our request id), tokens, clock, count, rotate_ms, blocks, seq.
ReanchorEvent = dict[str, Any]


@dataclass(frozen=True)
class StreamListener:
    """What a session does with its request's re-anchor news."""

    on_event: Callable[[ReanchorEvent], None]  # a shift every rank applied
    on_failure: Callable[[Unacknowledged], None]  # a shift some rank did not apply: re-anchoring must end


class ReanchorLink:
    def __init__(self, counters: EngineCounters, tag_prefix: str | None = None) -> None:
        self.listeners: dict[str, StreamListener] = {}
        # With several front ends on one engine core: the prefix of this one's request ids, so that a poll takes
        # only its own news (tripwire.Mailbox). None: the engine core's only client, everything is its news.
        self._tag_prefix = tag_prefix
        self.runtime: PositionRuntime | None = None  # what runs, as the first worker's set-up found it
        self._counters = counters
        self._poller: asyncio.Task[None] | None = None

    async def arm(self, llm: Any, wanted: bool) -> list[str]:
        """Run the worker-side set-up (guards, layout probes, exact tables); the reasons it failed, if any."""
        reports = await llm.collective_rpc("voxgate_reanchor_setup")
        self.runtime = runtime_summary(reports[0]) if reports else None
        problems = [str(r.get("reason") or "worker set-up failed") for r in reports if not r.get("ok")]
        if wanted and not problems:
            try:
                if not await llm.engine_core.call_utility_async(CONNECT_METHOD):
                    problems.append("vLLM's scheduler is not voxgate's: no session would be shifted")
                await self._call_poll(llm)  # the tripwire must answer before we rely on it
            except Exception as exc:
                problems.append(f"the re-anchor calls cannot reach the engine core ({exc}): shifts could go unchecked")
        if wanted and not problems:
            try:
                uncap_realtime_buffer()
            except RuntimeError as exc:
                problems.append(str(exc))
        if not problems:
            layers = reports[0].get("layers", [])
            log.info(
                "reanchor_armed",
                layers=len(layers),
                windows=reports[0].get("windows"),
                block_sizes=reports[0].get("block_sizes"),
                exact_rope_tables=reports[0].get("exact_rope_tables"),
                runtime=reports[0].get("runtime"),
                layouts=sorted({f"{x.get('kind')} {x.get('dtype')} {x.get('layout')}" for x in layers}),
            )
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
            report = await self._call_poll(llm)
        except Exception as exc:  # the engine's death is the engine monitor's business
            log.debug("reanchor_poll_failed", error=repr(exc))
            return
        self.dispatch(report)

    async def _call_poll(self, llm: Any) -> dict[str, Any]:
        args = () if self._tag_prefix is None else (self._tag_prefix,)
        report: dict[str, Any] = await llm.engine_core.call_utility_async(POLL_METHOD, *args)
        return report

    def dispatch(self, report: dict[str, Any]) -> None:
        """Hand one poll's news to the sessions, in the order the scheduler issued the shifts."""
        verdict = check(report)
        news: list[tuple[int, ReanchorEvent | Unacknowledged]] = [(int(e["seq"]), e) for e in verdict.applied]
        news += [(u.seq, u) for u in verdict.unacknowledged]
        for _, item in sorted(news, key=lambda n: n[0]):
            extra = self._counters.extra
            if isinstance(item, Unacknowledged):
                extra["reanchor_unacknowledged"] = extra.get("reanchor_unacknowledged", 0) + 1
                log.error(
                    "reanchor_unacknowledged",
                    request_id=item.tag,
                    seq=item.seq,
                    tokens=item.tokens,
                    clock=item.clock,
                    missing_ranks=list(item.missing_ranks),
                    ranks=item.ranks,
                    action="re-anchoring ends for this session; it rolls over from here",
                )
                if (listener := self.listeners.get(item.tag)) is not None:
                    listener.on_failure(item)
                continue
            extra["reanchors"] = extra.get("reanchors", 0) + 1
            if (listener := self.listeners.get(item["tag"])) is not None:
                listener.on_event(item)


def runtime_summary(report: dict[str, Any]) -> PositionRuntime | None:
    """What re-anchoring runs on, from a worker's set-up report (armed or refused): runner, async flag, KV dtype,
    and per KV group its kind, block size, window, attention backend, probed key layout(s) and cache dtype(s)."""
    runtime = report.get("runtime")
    if not runtime:
        return None
    kinds: dict[int, dict[str, set[str]]] = {}
    for layer in report.get("layers") or ():
        g = kinds.setdefault(int(layer.get("group", 0)), {"kind": set(), "layout": set(), "dtype": set()})
        for key, values in g.items():
            values.add(str(layer.get(key, "")))
    backends = list(runtime.get("backends") or ())
    sizes, windows = list(report.get("block_sizes") or ()), list(report.get("windows") or ())
    groups = []
    for i in range(max(len(backends), len(sizes), len(kinds))):
        seen = kinds.get(i, {})
        groups.append(
            KvGroupRuntime(
                kind=" | ".join(sorted(seen.get("kind", ()))),
                block_size=int(sizes[i]) if i < len(sizes) else 0,
                window=int(windows[i] or 0) if i < len(windows) else 0,
                attention_backend=backends[i] if i < len(backends) else "",
                key_layout=" | ".join(sorted(seen.get("layout", ()))),
                dtype=" | ".join(sorted(seen.get("dtype", ()))),
            )
        )
    return PositionRuntime(
        model_runner=str(runtime.get("runner", "")),
        async_scheduling=bool(runtime.get("async_scheduling")),
        kv_cache_dtype=str(runtime.get("kv_cache_dtype", "")),
        kv_groups=tuple(groups),
    )
