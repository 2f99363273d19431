"""Scheduler side of re-anchoring: vLLM's scheduler, plus a position-clock shift at chunk boundaries.

Loaded by vLLM through `scheduler_cls` in the EngineCore process. Every streaming chunk re-sends the
whole session to the worker as a new request, so truncating the scheduler's own copy of a session
while it is idle between chunks (`_update_request_as_session`) moves the worker's positions, slot
mapping and block table with it (model runner V1 and V2 alike). Only the cached keys need explicit work: the
next `schedule()` that runs the model hands each Shift to every worker rank (`voxgate_rotate` through
collective_rpc, connected by the engine core: engine_core.py), which rotates the blocks by R(-D) before that
step's forward. Unconnected, the scheduler never shifts.

On GPU, vLLM schedules asynchronously: the AsyncScheduler variant re-anchors a session only when
nothing of it is in flight, and otherwise retries at its next chunk (the margin leaves room for that).

Every shift handed to the workers gets a serial number and is kept until the sidecar's tripwire drains it
(`voxgate_issued`, through the engine-core call in tripwire.py) and checks that every worker rank applied it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections import deque
from collections.abc import Callable
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from engine_sidecar.engines.voxtral.reanchor.settings import LOGGER, ReanchorSettings, request_tag
from engine_sidecar.engines.voxtral.reanchor.shift import Shift

log = logging.getLogger(LOGGER)
ISSUED_KEPT = 4096  # issued shifts kept for the tripwire between two of its polls
COUNT_ATTR = "_voxgate_reanchors"  # on vLLM's Request: its re-anchors so far (gone with the request)

Rotate = Callable[[tuple[Shift, ...]], Any]  # hands shifts to every worker rank; returns once they ran


def sched_requests(scheduler: Any) -> dict[str, Any]:
    requests: dict[str, Any] = scheduler.requests
    return requests


def check_scheduling_mode(cls: type, async_scheduling: bool) -> None:
    """The subclass must match the scheduling vLLM resolved: the sync one under async scheduling would shift a
    session with a step in flight. Raised at construction, so the engine does not start half-right."""
    if issubclass(cls, AsyncScheduler) != async_scheduling:
        raise ValueError(
            f"{cls.__name__} does not match vLLM's resolved async_scheduling={async_scheduling}: "
            "pick ReanchorAsyncScheduler exactly when async scheduling is on"
        )


class _ReanchorMixin:
    """Mixed in before a vLLM scheduler class; everything it touches is listed in vllm_window/symbols.py."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        sched: Any = self
        check_scheduling_mode(type(self), bool(sched.vllm_config.scheduler_config.async_scheduling))
        self._vg_settings = ReanchorSettings.from_vllm_config(sched.vllm_config)
        self._vg_pending: dict[str, Shift] = {}
        self._vg_seq = 0
        self._vg_issued: deque[dict[str, Any]] = deque(maxlen=ISSUED_KEPT)
        managers = sched.kv_cache_manager.coordinator.single_type_managers
        # Every group's blocks must stay whole: D is a multiple of every group's block size.
        self._vg_unit = math.lcm(*(m.block_size for m in managers))
        self._vg_warned: set[str] = set()
        self._vg_rotate: Rotate | None = None

    def voxgate_connect(self, rotate: Rotate) -> None:
        """The engine core's way to the workers (engine_core.py): from now on sessions may be shifted."""
        self._vg_rotate = rotate

    # -- hooks into vLLM ------------------------------------------------------

    def _update_request_as_session(self, session: Any, update: Any) -> None:
        super()._update_request_as_session(session, update)  # type: ignore[misc]
        if self._vg_settings is not None and (tag := request_tag(session.sampling_params)) is not None:
            self._vg_maybe_shift(session, tag)

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        out = super().schedule(*args, **kwargs)  # type: ignore[misc]
        # Rotate with a step that runs the model, before the workers get it.
        if self._vg_pending and out.total_num_scheduled_tokens > 0 and self._vg_rotate is not None:
            live = sched_requests(self)
            issued = []
            for rid, shift in self._vg_pending.items():
                if rid in live:
                    self._vg_seq += 1
                    issued.append(dataclasses.replace(shift, seq=self._vg_seq))
            self._vg_pending = {}
            self._vg_issued.extend(shift.record() for shift in issued)
            try:
                self._vg_rotate(tuple(issued))
            except Exception:  # a rank that did not rotate does not acknowledge: the sidecar's tripwire acts
                log.exception("voxgate re-anchoring: handing %d shift(s) to the workers failed", len(issued))
        return out

    def voxgate_issued(self) -> list[dict[str, Any]]:
        """The shifts handed to the workers since the last call (Shift.record), oldest first."""
        issued = list(self._vg_issued)
        self._vg_issued.clear()
        return issued

    # -- the shift ------------------------------------------------------------

    def _vg_idle(self, session: Any) -> bool:
        return True

    def _vg_maybe_shift(self, session: Any, tag: str) -> None:
        sched: Any = self
        assert self._vg_settings is not None
        if self._vg_rotate is None:
            return
        if session.num_tokens < sched.max_model_len - self._vg_settings.margin_tokens or not self._vg_idle(session):
            return
        managers = sched.kv_cache_manager.coordinator.single_type_managers
        computed = session.num_computed_tokens
        # Positions that have left every group's window: the head we may drop.
        room = min(m.get_num_skipped_tokens(computed) for m in managers)
        shift = room // self._vg_unit * self._vg_unit
        features = session.mm_features
        dropped = 0
        while dropped < len(features) and features[dropped].mm_position.offset < shift:
            dropped += 1
        unconsumed = any(f.mm_position.offset + f.mm_position.length > computed for f in features[:dropped])
        if shift <= 0 or unconsumed or session.block_hashes:
            if session.request_id not in self._vg_warned:
                self._vg_warned.add(session.request_id)
                log.warning(
                    "re-anchor not possible for %s at clock %d (droppable head %d, unit %d)",
                    session.request_id,
                    computed,
                    room,
                    self._vg_unit,
                )
            return
        self._vg_drop_features(session, dropped, shift)
        del session._all_token_ids[:shift]  # the public all_token_ids view wraps this same list
        del session.prompt_token_ids[:shift]
        session.num_prompt_tokens -= shift
        session.num_computed_tokens -= shift
        blocks = tuple(self._vg_drop_blocks(m, session.request_id, shift) for m in managers)
        count = getattr(session, COUNT_ATTR, 0) + 1
        setattr(session, COUNT_ATTR, count)
        event = Shift(session.request_id, tag, shift, blocks, session.num_computed_tokens, count)
        earlier = self._vg_pending.get(session.request_id)
        self._vg_pending[session.request_id] = earlier.then(event) if earlier else event
        log.debug("re-anchored %s by %d: clock %d", session.request_id, shift, session.num_computed_tokens)

    def _vg_drop_features(self, session: Any, dropped: int, shift: int) -> None:
        """Consumed audio features below the new origin go; the rest move down (the encoder cache holds
        indices into this list, so its entries are freed or renumbered to match)."""
        sched: Any = self
        cache = sched.encoder_cache_manager
        rid = session.request_id
        for index in sorted(cache.request_cached_ids.get(rid, ())):
            if index < dropped:
                cache.free_encoder_input(session, index)
        if rid in cache.request_cached_ids:
            cache.request_cached_ids[rid] = {i - dropped for i in cache.request_cached_ids[rid]}
        del session.mm_features[:dropped]
        for feature in session.mm_features:
            feature.mm_position = dataclasses.replace(feature.mm_position, offset=feature.mm_position.offset - shift)

    @staticmethod
    def _vg_drop_blocks(manager: Any, rid: str, shift: int) -> tuple[int, ...]:
        """Drop the head blocks (normally already nulled by the window); return the live ones to rotate."""
        count = shift // manager.block_size
        blocks = manager.req_to_blocks[rid]
        head, blocks[:count] = blocks[:count], []
        null = manager._null_block
        if real := [b for b in head if b is not null]:
            manager.block_pool.free_blocks(real)
        if rid in manager.num_cached_block:
            manager.num_cached_block[rid] = max(0, manager.num_cached_block[rid] - count)
        return tuple(b.block_id for b in blocks if b is not null)


class ReanchorScheduler(_ReanchorMixin, Scheduler):
    """Synchronous scheduling (vLLM's choice on CPU)."""


class ReanchorAsyncScheduler(_ReanchorMixin, AsyncScheduler):
    """Asynchronous scheduling (vLLM's default on GPU): shift only a session with nothing in flight."""

    def _vg_idle(self, session: Any) -> bool:
        return (
            session.num_in_flight_tokens == 0
            and session.num_stale_output_tokens == 0
            and session.num_output_placeholders == 0
            and not session.spec_token_ids
        )


def scheduler_qualname(async_scheduling: bool) -> str:
    cls = ReanchorAsyncScheduler if async_scheduling else ReanchorScheduler
    return f"{cls.__module__}.{cls.__qualname__}"
