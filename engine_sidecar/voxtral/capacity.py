"""How many sessions the engine admits: what its KV pool holds, and whether it has real-time headroom now."""

from __future__ import annotations

import math
from collections.abc import Sequence


def kv_sessions(num_blocks: int, block_sizes: Sequence[int], windows: Sequence[int | None], max_model_len: int) -> int:
    """Sessions the KV pool holds at once. A sliding-window group keeps the window's tokens in whole blocks,
    plus one because the window rarely starts on a block boundary; a full-attention group (None) up to
    max_model_len. vLLM keeps one null block aside."""
    per_session = sum(math.ceil(min(w or max_model_len, max_model_len) / b) + 1
                      for b, w in zip(block_sizes, windows, strict=True))
    return max(0, (num_blocks - 1) // per_session)


def lag_refusal(lags_ms: Sequence[int], max_lag_ms: int) -> str | None:
    """None when new sessions may come; else why not. A session whose audio waits longer than max_lag_ms
    beyond the model's own delay shows the engine has no real-time headroom left: one more would slow all."""
    behind = [lag for lag in lags_ms if lag > max_lag_ms]
    if not max_lag_ms or not behind:
        return None
    return (f"no real-time headroom: {len(behind)} session(s) behind real time by up to {max(behind)} ms "
            f"(admission_max_lag_ms {max_lag_ms})")
