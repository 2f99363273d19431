"""The service's engines: one sidecar, or several (`--engines N`, one per GPU with `--gpus`), as one.

Each engine is a SidecarSupervisor of its own (process, socket, health checks, restarts). The pool is
ready while any engine is, and serving while any engine serves. A new engine session goes to the engine
with the most free capacity as the engines report it (their max_sessions, which voxtral bounds by its KV
cache and max_num_seqs, less the slots in use), engines that admit first, ties to the one this service
placed fewest sessions on. Sessions ask on every open, so when an engine dies its sessions' reconnects
(engine_chain: replay of the unheard audio) go at once to another engine with room; the dead one restarts
under its own supervisor and rejoins when it answers. One engine behaves exactly as the lone sidecar did.

An engine with K front ends (voxtral's `frontends=K`: one sidecar process, one engine core, K front-end
processes, each on its own socket with its share of the capacity) is K placement targets. The supervisor
of the spawned process follows front end 0 (its `--socket`) and restarts the sidecar. Front end 0's status
lists every front end's socket; the others are attached (the `--sidecar-external` mode) to theirs and only
wait when theirs goes away, since the sidecar replaces a dead front end itself. Placement, failover and
readiness treat every target as an engine of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import structlog

from engine_api.v1 import engine_pb2, engine_pb2_grpc

from . import metrics
from .config import Config
from .gpus import EngineSpec, engine_specs
from .session.engine_link import EngineLink
from .sidecar import SidecarSupervisor

log = structlog.get_logger("engine_pool")
UNBOUNDED = 1 << 30  # free capacity of an engine that states no max_sessions


@dataclass(frozen=True)
class EngineLoad:
    """One ready engine as placement sees it."""

    index: int  # the target's (an engine's, or one of its front ends')
    admitting: bool  # its latest status: headroom and a free slot
    free: int  # max_sessions less the slots in use (reported, or placed since, whichever is more)
    placed: int  # engine streams this service has open on it


def placement_order(loads: Sequence[EngineLoad]) -> list[int]:
    """Engine indexes, best first: admitting with room, then most free capacity, then fewest placed here."""
    ranked = sorted(loads, key=lambda e: (not (e.admitting and e.free > 0), -e.free, e.placed, e.index))
    return [e.index for e in ranked]


def _ready_gauge(engine: SidecarSupervisor) -> float:
    return float(engine.ready)


def target_label(engine: int, frontend: int | None) -> str:
    """A placement target's name in metrics: the engine's index, `<engine>.<front end>` with several front ends."""
    return str(engine) if frontend is None else f"{engine}.{frontend}"


class EnginePool:
    def __init__(
        self,
        config: Config,
        on_ready_change: Callable[[bool], None],
        on_status: Callable[[], None] = lambda: None,
        specs: Sequence[EngineSpec] | None = None,
    ) -> None:
        self.specs = tuple(specs if specs is not None else engine_specs(config))
        self._config = config
        self._several = len(self.specs) > 1
        self._on_ready_change = on_ready_change
        self._on_status = on_status
        self._ready = False  # the pool's readiness as last told
        # The placement targets, flat: each engine's process supervisor; then, once an engine's status lists
        # several front ends, one attached to each of its other front ends (_follow_front_ends).
        self.engines: list[SidecarSupervisor] = []
        self._engine_ids: list[int] = []  # the engine (spec index) of each target
        self._links: list[set[EngineLink]] = []
        self._labels: list[str] = []
        self._attaching: set[asyncio.Future[None]] = set()
        for spec in self.specs:
            self._add(
                spec.index,
                SidecarSupervisor(
                    replace(config, sidecar_socket=spec.socket),
                    self._engine_changed,
                    self._status_changed,
                    index=spec.index if self._several else None,
                    env=spec.env,
                ),
            )

    def _add(self, engine: int, target: SidecarSupervisor) -> None:
        n = len(self.engines)
        self.engines.append(target)
        self._engine_ids.append(engine)
        self._links.append(set())
        self._labels.append("")
        self._label(n)

    def _label(self, n: int) -> None:
        """Target n's gauges, under its name (which changes once its engine turns out to have front ends)."""
        label = target_label(self._engine_ids[n], self.engines[n].frontend)
        if label == self._labels[n]:
            return
        if self._labels[n]:
            metrics.ENGINE_SESSIONS.remove(self._labels[n])
            metrics.ENGINE_READY.remove(self._labels[n])
        self._labels[n] = label
        metrics.ENGINE_SESSIONS.labels(label).set_function(partial(self._placed_gauge, n))
        metrics.ENGINE_READY.labels(label).set_function(partial(_ready_gauge, self.engines[n]))

    def _follow_front_ends(self) -> list[SidecarSupervisor]:
        """Targets for the front ends an engine's status lists and the pool does not follow yet: each attached
        (the `--sidecar-external` mode) to its socket, since the sidecar replaces a dead front end itself. The
        new ones, still to be started."""
        new: list[SidecarSupervisor] = []
        for n, target in enumerate(list(self.engines)):
            sockets = list(target.status.frontend_sockets) if target.status is not None else []
            if target.frontend is not None and target.frontend > 0 or len(sockets) < 2:
                continue
            self._label(n)  # front end 0 of several now
            engine = self._engine_ids[n]
            known = {str(t.socket) for t, e in zip(self.engines, self._engine_ids, strict=True) if e == engine}
            for i, socket in enumerate(sockets):
                if socket not in known and i > 0:
                    other = SidecarSupervisor(
                        replace(self._config, sidecar_socket=socket, sidecar_external=True),
                        self._engine_changed,
                        self._status_changed,
                        index=engine if self._several else None,
                        frontend=i,
                    )
                    self._add(engine, other)
                    new.append(other)
        if new:
            log.info("frontends_followed", sockets=[str(t.socket) for t in new])
        return new

    def _attach_front_ends(self) -> None:
        """Start following the front ends a status just listed: attaching waits for nothing (each target is
        ready once its front end answers)."""
        for target in self._follow_front_ends():
            task = asyncio.ensure_future(target.start())
            self._attaching.add(task)
            task.add_done_callback(self._attaching.discard)

    def _status_changed(self) -> None:
        self._attach_front_ends()
        self._on_status()

    def _engine_of(self, target: int) -> int:
        """The engine (spec index) a target belongs to."""
        return self._engine_ids[target]

    async def start(self) -> None:
        """Start every engine (at once: a GPU box's engines load in parallel); any failure is fatal."""
        if len(self.specs) > 1:
            log.info("engines", count=len(self.specs), gpus=[s.gpu for s in self.specs])
        results = await asyncio.gather(*(e.start() for e in self.engines), return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            await self.stop()
            raise failures[0]
        await asyncio.gather(*(t.start() for t in self._follow_front_ends()))

    async def stop(self) -> None:
        await asyncio.gather(*(e.stop() for e in self.engines))

    def _engine_changed(self, _ready: bool) -> None:
        """An engine came up or went down: the pool's readiness may follow (any engine up), its room changed."""
        self._attach_front_ends()
        metrics.ENGINE_UP.set(self.ready_count)
        if len(self.engines) > 1:
            log.info(
                "engines_up",
                up=[target_label(self._engine_of(n), e.frontend) for n, e in enumerate(self.engines) if e.ready],
            )
        if self.ready != self._ready:
            self._ready = self.ready
            self._on_ready_change(self._ready)
        else:
            self._on_status()  # the same readiness, other room: re-derive readiness and audit the counts

    @property
    def ready(self) -> bool:
        """Some engine is up and has answered."""
        return any(e.ready for e in self.engines)

    @property
    def admitting(self) -> bool:
        return any(e.admitting for e in self.engines)

    @property
    def serving(self) -> bool:
        """Some engine is up, admits and is not stopping (the server adds its own room and draining)."""
        return any(e.serving for e in self.engines)

    @property
    def ready_count(self) -> int:
        """Engines with a target up (a front end of it)."""
        return len({self._engine_of(n) for n, e in enumerate(self.engines) if e.ready})

    def statuses(self) -> list[engine_pb2.GetStatusResponse]:
        """The status of each engine that is up; while none is, the last each said (a lone engine's down time
        reads as it did before pools)."""
        up = [e.status for e in self.engines if e.ready and e.status is not None]
        return up or [e.status for e in self.engines if e.status is not None]

    def engine_rows(self) -> list[tuple[int, bool, engine_pb2.GetStatusResponse | None]]:
        """Each engine (spec index): whether a target of it is up, and its latest status (its up target's)."""
        rows = []
        for spec in self.specs:
            targets = [e for n, e in enumerate(self.engines) if self._engine_of(n) == spec.index]
            up = [e for e in targets if e.ready and e.status is not None]
            said = up or [e for e in targets if e.status is not None]
            rows.append((spec.index, bool(up), said[0].status if said else None))
        return rows

    @property
    def status(self) -> engine_pb2.GetStatusResponse | None:
        """One engine's latest status, an up one's if any (they run the same engine and model)."""
        statuses = self.statuses()
        return statuses[0] if statuses else None

    def check_soon(self) -> None:
        """Health-check now the engines that do not admit (a slot may just have been freed)."""
        for e in self.engines:
            if not e.admitting:
                e.check_soon()

    def placed_on(self, index: int) -> int:
        links = self._links[index]
        links.difference_update([link for link in links if link.done])
        return len(links)

    def _placed_gauge(self, index: int) -> float:
        return float(self.placed_on(index))

    def _index(self, stub: engine_pb2_grpc.EngineStub) -> int | None:
        return next((n for n, e in enumerate(self.engines) if e.stub is stub), None)

    def frames_socket(self, stub: engine_pb2_grpc.EngineStub) -> Path | None:
        return self.engines[n].frames_socket if (n := self._index(stub)) is not None else None

    def place(self, stub: engine_pb2_grpc.EngineStub, link: EngineLink) -> None:
        if (n := self._index(stub)) is not None:
            self._links[n].add(link)

    def opened(self, stub: engine_pb2_grpc.EngineStub, link: EngineLink) -> None:
        if len(self.engines) > 1 and (n := self._index(stub)) is not None:
            where = {"frontend_index": f} if (f := self.engines[n].frontend) is not None else {}
            log.info("engine_placed", engine_index=self._engine_of(n), **where, placed=self.placed_on(n))

    def _load(self, n: int) -> EngineLoad:
        e = self.engines[n]
        status, placed = e.status, self.placed_on(n)
        capacity = status.max_sessions if status is not None and status.max_sessions else UNBOUNDED
        in_use = max(status.active_sessions if status is not None else 0, placed)  # its report may be older
        return EngineLoad(n, e.admitting, capacity - in_use, placed)

    async def pick(
        self, wait_s: float, failed: engine_pb2_grpc.EngineStub | None = None
    ) -> list[engine_pb2_grpc.EngineStub]:
        """Ready engines' stubs, best first. The engine whose stream just failed is left out while its stub is
        the failed one (it is being checked); when no other engine is ready, wait up to wait_s for one."""
        suspect = self._index(failed) if failed is not None else None
        if suspect is not None:
            self.engines[suspect].check_soon()  # an attached sidecar: the broken stream may be the first sign
        loads = [self._load(n) for n, e in enumerate(self.engines) if e.ready and e.stub is not None and n != suspect]
        if loads:
            stubs = [self.engines[n].stub for n in placement_order(loads)]
            return [s for s in stubs if s is not None]
        stub = await self._first_ready(wait_s, failed)
        return [stub] if stub is not None else []

    async def _first_ready(
        self, wait_s: float, failed: engine_pb2_grpc.EngineStub | None
    ) -> engine_pb2_grpc.EngineStub | None:
        """The first engine ready within wait_s (each supervisor waits as a lone one did), or None."""
        if len(self.engines) == 1:
            return await self.engines[0].wait_ready(wait_s, failed)
        waits = {
            asyncio.ensure_future(e.wait_ready(wait_s, failed if e.stub is failed else None)) for e in self.engines
        }
        try:
            while waits:
                done, waits = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if (stub := task.result()) is not None:
                        return stub
            return None
        finally:
            for task in waits:
                task.cancel()
            await asyncio.gather(*waits, return_exceptions=True)
