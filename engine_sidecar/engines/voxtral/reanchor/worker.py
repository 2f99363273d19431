"""Worker side of re-anchoring, loaded by vLLM as `worker_extension_cls`: its methods become the worker's and
are called through `collective_rpc`. Nothing of vLLM's is patched or overridden.

The scheduler (scheduler.py) hands each shift to every worker rank through `voxgate_rotate`, from inside its
`schedule()`: after every step already handed to the workers (collective_rpc's channel is ordered) and before
the step it is scheduling, so the keys are rotated by R(-D) after the last forward that used the old positions
and before the first that uses the new ones. Works the same with model runner V1 and V2: the keys are found
through the attention layers' own `kv_cache` (vllm_window.worker).
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

from engine_sidecar.engines.voxtral.reanchor.rotator import (
    KeyRotator,
    Unsupported,
    build_rotator,
    exact_rope_tables,
    precise_rope,
)
from engine_sidecar.engines.voxtral.reanchor.settings import LOGGER, ReanchorSettings
from engine_sidecar.engines.voxtral.reanchor.shift import Shift
from engine_sidecar.engines.voxtral.vllm_window.worker import kv_fingerprint, model_runner

log = logging.getLogger(LOGGER)
STATE_ATTR = "_voxgate_reanchor"  # on the worker: the armed state; absent or None: shifts are not applied
EVENTS_KEPT = 4096


@dataclass(frozen=True)
class Event:
    """One re-anchor as the worker applied it, for the sidecar's diagnostics and stats."""

    tag: str
    tokens: int
    clock: int
    count: int  # re-anchors of this request so far
    rotate_ms: float
    blocks: int  # live KV blocks the request holds (all groups): constant over a long session
    seq: int  # the scheduler's serial number of the shift: this rank's acknowledgement of it


@dataclass
class Armed:
    """What one worker holds once armed: the rotator over its live KV cache, and the events not yet polled."""

    settings: ReanchorSettings
    rotator: KeyRotator
    fingerprint: tuple[Any, ...]  # the KV cache the rotator was built over (vLLM may re-bind it: rebuild then)
    report: dict[str, Any]
    events: deque[Event]
    total: int = 0

    @classmethod
    def over(cls, runner: Any, rotator: KeyRotator, settings: ReanchorSettings, report: dict[str, Any]) -> Armed:
        return cls(settings, rotator, kv_fingerprint(runner), report, deque(maxlen=EVENTS_KEPT))

    def apply(self, runner: Any, shift: Shift) -> None:
        if (now := kv_fingerprint(runner)) != self.fingerprint:
            log.info("voxgate re-anchoring: the KV cache was re-bound; finding the keys again")
            self.rotator, self.fingerprint = build_rotator(runner, self.settings), now
        start = time.perf_counter()
        self.rotator.rotate(shift)
        seconds = time.perf_counter() - start
        self.total += 1
        blocks = sum(len(ids) for ids in shift.blocks)
        self.events.append(
            Event(shift.tag, shift.tokens, shift.clock, shift.count, round(seconds * 1000, 3), blocks, shift.seq)
        )


def describe_runtime(runner: Any) -> dict[str, Any]:
    """What actually runs, for the start-up log and `voxgate status`: runner, async flag, backend per group."""
    config = runner.vllm_config
    layers = runner.compilation_config.static_forward_context
    backends = []
    for group in runner.kv_cache_config.kv_cache_groups:
        names = {type(layers[n].impl).__name__ for n in group.layer_names if n in layers}
        backends.append(",".join(sorted(names)))
    cls = type(runner)
    return {
        "runner": f"{cls.__module__}.{cls.__qualname__}",
        "async_scheduling": bool(config.scheduler_config.async_scheduling),
        "backends": backends,
        "kv_cache_dtype": str(config.cache_config.cache_dtype),
    }


def arm(worker: Any, armed: Armed | None) -> None:
    """Arm (or, with None, disarm) a worker: what voxgate_rotate applies shifts with."""
    setattr(worker, STATE_ATTR, armed)


class ReanchorWorkerExtension:
    """Mixed into vLLM's worker as an extra base class: only new, prefixed method names."""

    def voxgate_reanchor_setup(self) -> dict[str, Any]:
        """Run the worker-side guards, probe the KV layouts, arm. Never raises: reports."""
        if (armed := getattr(self, STATE_ATTR, None)) is not None:
            # Another front end of this engine core armed it (process/core_host.py): arming again would drop the
            # events not yet polled and rebuild the RoPE tables under live sessions. Same answer instead.
            return dict(armed.report)
        runner = model_runner(self)
        settings = ReanchorSettings.from_vllm_config(runner.vllm_config) or ReanchorSettings()
        try:
            for attr in ("kv_cache_config", "compilation_config", "get_model"):
                if not hasattr(runner, attr):
                    raise Unsupported(f"vLLM's model runner has no {attr}")
            tables = exact_rope_tables(runner) if settings.exact_rope_tables else 0
            if settings.precise_rope:
                precise_rope(runner)
            rotator = build_rotator(runner, settings)
            windows, units = _group_geometry(runner)
            _check_margin(runner.vllm_config.model_config.max_model_len, settings.margin_tokens, windows, units)
        except Unsupported as exc:
            log.warning("voxgate re-anchoring unavailable: %s", exc)
            return {"ok": False, "reason": str(exc), **_what_runs(runner)}
        except Exception as exc:  # a surprise inside vLLM: fall back rather than break the engine
            log.exception("voxgate re-anchoring self-check failed")
            return {"ok": False, "reason": f"self-check failed: {exc!r}", **_what_runs(runner)}
        report = {
            "ok": True,
            "reason": "",
            "layers": rotator.describe(),
            "exact_rope_tables": tables,
            "windows": windows,
            "block_sizes": units,
            "runtime": describe_runtime(runner),
        }
        arm(self, Armed.over(runner, rotator, settings, report))
        return dict(report)

    def voxgate_rotate(self, shifts: tuple[Shift, ...]) -> int:
        """Rotate the cached keys of each shifted session by R(-D); how many shifts were applied (0: not armed,
        and then nothing is acknowledged: the sidecar's tripwire sees it)."""
        armed: Armed | None = getattr(self, STATE_ATTR, None)
        if armed is None:
            return 0
        runner = model_runner(self)
        for shift in shifts:
            armed.apply(runner, shift)
        return len(shifts)

    def voxgate_kv_geometry(self) -> dict[str, Any]:
        """The KV pool as this worker holds it: blocks, and per group its block size and window (None: full)."""
        runner = model_runner(self)
        groups = runner.kv_cache_config.kv_cache_groups
        return {
            "num_blocks": int(runner.kv_cache_config.num_blocks),
            "block_sizes": [int(g.kv_cache_spec.block_size) for g in groups],
            "windows": [getattr(g.kv_cache_spec, "sliding_window", None) for g in groups],
        }

    def voxgate_reanchor_events(self) -> dict[str, Any]:
        """Events since the last call (each one this rank's acknowledgement of a shift it applied), plus totals."""
        armed: Armed | None = getattr(self, STATE_ATTR, None)
        if armed is None:
            return {"events": [], "total": 0, "armed": False}
        events = [asdict(e) for e in armed.events]
        armed.events.clear()
        return {"events": events, "total": armed.total, "armed": True}

    def voxgate_reanchor_disarm(self) -> bool:
        """Stop applying shifts on this rank (neither rotated nor acknowledged): what a rank that misses the
        call looks like. The sidecar's tripwire must then end re-anchoring for the sessions the scheduler
        shifts (tests/engine/test_reanchor_tripwire.py). True if it was armed."""
        armed = getattr(self, STATE_ATTR, None) is not None
        arm(self, None)
        return armed


def _what_runs(runner: Any) -> dict[str, Any]:
    """Best effort, for a refusal's report: the runtime and KV groups as far as they can be read."""
    out: dict[str, Any] = {}
    try:
        out["runtime"] = describe_runtime(runner)
        groups = runner.kv_cache_config.kv_cache_groups
        out["block_sizes"] = [int(g.kv_cache_spec.block_size) for g in groups]
        out["windows"] = [getattr(g.kv_cache_spec, "sliding_window", None) or 0 for g in groups]
    except Exception:  # noqa: BLE001 - describing is never worth failing a refusal over
        pass
    return out


def _group_geometry(runner: Any) -> tuple[list[int], list[int]]:
    groups = runner.kv_cache_config.kv_cache_groups
    return ([int(g.kv_cache_spec.sliding_window) for g in groups], [int(g.kv_cache_spec.block_size) for g in groups])


def _check_margin(max_model_len: int, margin: int, windows: list[int], block_sizes: list[int]) -> None:
    """The first event fires at clock C = max_model_len - margin and must be able to drop at least one block
    unit L from every group: C - window >= L. And the margin must leave room for the prompt's first chunk."""
    unit = math.lcm(*block_sizes)
    needed = max(windows) + unit + margin
    if margin < 32:
        raise Unsupported(f"reanchor margin {margin} < 32 tokens: a chunk could reach max_model_len first")
    if max_model_len < needed:
        raise Unsupported(
            f"max_model_len {max_model_len} leaves no room to re-anchor: it needs at least "
            f"{needed} (largest window {max(windows)} + block unit {unit} + margin {margin}); "
            "raise --max-model-len, narrow the windows or lower the margin"
        )
