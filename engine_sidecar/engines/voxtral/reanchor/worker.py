"""Worker side of re-anchoring, loaded by vLLM as `worker_extension_cls` (methods callable through
collective_rpc) and installed into every vLLM process by the general plugin (plugin.py).

The hook runs first thing in each model step (`_update_states`, before any forward): shifts the
scheduler attached to this step's SchedulerOutput rotate their sessions' live cached keys by R(-D),
after the last forward that used the old positions and before the first that uses the new ones.
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
from engine_sidecar.engines.voxtral.reanchor.shift import OUTPUT_ATTR, Shift

log = logging.getLogger(LOGGER)
ROTATOR_ATTR = "_voxgate_rotator"  # set on the model runner by setup; absent: the hook does nothing
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


class _Ledger:
    """Per-request counts and recent events, drained by the sidecar's poll."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.events: deque[Event] = deque(maxlen=EVENTS_KEPT)
        self.total = 0

    def record(self, shift: Shift, seconds: float) -> None:
        self.counts[shift.req_id] = count = self.counts.get(shift.req_id, 0) + 1
        self.total += 1
        self.events.append(
            Event(
                shift.tag,
                shift.tokens,
                shift.clock,
                count,
                round(seconds * 1000, 3),
                sum(len(ids) for ids in shift.blocks),
                shift.seq,
            )
        )


def install_hook() -> bool:
    """Wrap GPUModelRunner._update_states (the CPU runner inherits it). Idempotent; False if it is missing."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    original = getattr(GPUModelRunner, "_update_states", None)
    if original is None:
        return False
    if getattr(original, "_voxgate_hook", False):
        return True

    def _update_states(self: Any, scheduler_output: Any) -> Any:
        shifts = getattr(scheduler_output, OUTPUT_ATTR, None)
        rotator: KeyRotator | None = getattr(self, ROTATOR_ATTR, None)
        if shifts and rotator is not None:
            ledger: _Ledger = self._voxgate_ledger
            for shift in shifts:
                start = time.perf_counter()
                rotator.rotate(shift)
                ledger.record(shift, time.perf_counter() - start)
        return original(self, scheduler_output)

    _update_states._voxgate_hook = True  # type: ignore[attr-defined]
    GPUModelRunner._update_states = _update_states  # type: ignore[method-assign]
    return True


def runner_problem(runner: Any) -> str | None:
    """Why re-anchoring cannot run on this live runner object, or None: the hook must be what its class calls.

    vLLM 0.32's model runner V2 (`vllm.v1.worker.gpu.model_runner.GPUModelRunner`, chosen wherever Triton is
    unless VLLM_USE_V2_MODEL_RUNNER=0) shares no base with the V1 runner and has no `_update_states`: armed there,
    the scheduler would shift positions while no key is rotated."""
    cls = type(runner)
    method = getattr(cls, "_update_states", None)
    if method is None or not getattr(method, "_voxgate_hook", False):
        return (
            f"model runner {cls.__module__}.{cls.__qualname__} is not the hooked V1 runner (model runner V2? "
            "set VLLM_USE_V2_MODEL_RUNNER=0): keys would not be rotated"
        )
    return None


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


class ReanchorWorkerExtension:
    """Mixed into vLLM's worker as an extra base class: only new, prefixed method names."""

    def voxgate_reanchor_setup(self) -> dict[str, Any]:
        """Run the worker-side guards, probe the KV layouts, arm the hook. Never raises: reports."""
        runner: Any = self.model_runner  # type: ignore[attr-defined]
        if (armed := getattr(runner, "_voxgate_setup_report", None)) is not None:
            # Another front end of this engine core armed it (process/core_host.py): arming again would reset the
            # ledger under its live sessions and rebuild the RoPE tables. Same answer instead.
            return dict(armed)
        settings = ReanchorSettings.from_vllm_config(runner.vllm_config) or ReanchorSettings()
        try:
            if not install_hook():
                raise Unsupported("vLLM's model runner has no _update_states to hook")
            if problem := runner_problem(runner):
                raise Unsupported(problem)
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
        runner._voxgate_ledger = _Ledger()
        setattr(runner, ROTATOR_ATTR, rotator)
        runner._voxgate_setup_report = report = {
            "ok": True,
            "reason": "",
            "layers": rotator.describe(),
            "exact_rope_tables": tables,
            "windows": windows,
            "block_sizes": units,
            "runtime": describe_runtime(runner),
        }
        return dict(report)

    def voxgate_kv_geometry(self) -> dict[str, Any]:
        """The KV pool as this worker holds it: blocks, and per group its block size and window (None: full)."""
        runner: Any = self.model_runner  # type: ignore[attr-defined]
        groups = runner.kv_cache_config.kv_cache_groups
        return {
            "num_blocks": int(runner.kv_cache_config.num_blocks),
            "block_sizes": [int(g.kv_cache_spec.block_size) for g in groups],
            "windows": [getattr(g.kv_cache_spec, "sliding_window", None) for g in groups],
        }

    def voxgate_reanchor_events(self) -> dict[str, Any]:
        """Events since the last call (each one this rank's acknowledgement of a shift it applied), plus totals."""
        runner: Any = self.model_runner  # type: ignore[attr-defined]
        ledger: _Ledger | None = getattr(runner, "_voxgate_ledger", None)
        armed = getattr(runner, ROTATOR_ATTR, None) is not None
        if ledger is None:
            return {"events": [], "total": 0, "armed": armed}
        events = [asdict(e) for e in ledger.events]
        ledger.events.clear()
        for req_id in [r for r in ledger.counts if r not in runner.requests]:  # finished: forget
            del ledger.counts[req_id]
        return {"events": events, "total": ledger.total, "armed": armed}

    def voxgate_reanchor_disarm(self) -> bool:
        """Stop applying shifts on this rank (the hook then neither rotates nor acknowledges): what a rank whose
        hook is not called looks like. The sidecar's tripwire must then end re-anchoring for the sessions the
        scheduler shifts (tests/engine/test_reanchor_tripwire.py). True if it was armed."""
        runner: Any = self.model_runner  # type: ignore[attr-defined]
        armed = getattr(runner, ROTATOR_ATTR, None) is not None
        if armed:
            delattr(runner, ROTATOR_ATTR)
        runner._voxgate_setup_report = None
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
