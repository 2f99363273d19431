"""Admission: how many sessions the engine's KV pool holds, and whether it has real-time headroom now.

(The planner's `voxtral_plan/capacity.py` sizes a GPU before vLLM starts; this counts what the started engine
has, with the planner's per-stream block formula.)
"""

from __future__ import annotations

from collections.abc import Sequence

from engine_sidecar.engines.voxtral.plan.capacity import blocks_held


def kv_sessions(num_blocks: int, block_sizes: Sequence[int], windows: Sequence[int | None], max_model_len: int) -> int:
    """Sessions the KV pool holds at once: per session, each group's blocks_held (a full-attention group, None,
    holds up to max_model_len; one token scheduled per step). vLLM keeps one null block aside."""
    per_session = sum(
        blocks_held(w or max_model_len, b, max_model_len) for b, w in zip(block_sizes, windows, strict=True)
    )
    return max(0, (num_blocks - 1) // per_session)


def lag_refusal(lags_ms: Sequence[int], max_lag_ms: int) -> str | None:
    """None when new sessions may come; else why not. A session whose audio waits longer than max_lag_ms
    beyond the model's own delay shows the engine has no real-time headroom left: one more would slow all."""
    behind = [lag for lag in lags_ms if lag > max_lag_ms]
    if not max_lag_ms or not behind:
        return None
    return (
        f"no real-time headroom: {len(behind)} session(s) behind real time by up to {max(behind)} ms "
        f"(admission_max_lag_ms {max_lag_ms})"
    )
