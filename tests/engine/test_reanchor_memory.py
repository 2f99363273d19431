"""Half an hour of audio in one session on a tiny max_model_len: ≥ 50 re-anchors at constant memory.

Fed as fast as the engine takes it (~7 minutes here). Memory is sampled at every re-anchor: the KV
blocks the session holds, and the RSS of every process (this one, which owns AsyncLLM like the sidecar,
the EngineCore and the Worker). vLLM's multimodal receiver cache is off (mm_processor_cache_gb=0, as the
voxtral engine always sets it): with it on, the EngineCore would grow ~11-14 KB per token.
"""

from __future__ import annotations

import os
import re
from typing import Any

import psutil
import pytest

from engine_api.outputs import Closed, Diagnostic
from tests.engine.conftest import Harness
from tests.engine.test_reanchor import SMALL, TINY_GEOMETRY, speech

pytest.importorskip("vllm")

MINUTES = 30
WARM_UP_EVENTS = 10


def rss_by_process() -> dict[str, int]:
    me = psutil.Process(os.getpid())
    out = {"front end": me.memory_info().rss}
    for child in me.children(recursive=True):
        if child.name().startswith("VLLM::"):
            out[child.name()] = child.memory_info().rss
    return out


@pytest.mark.timeout(2100)  # vLLM start (240 s) + the session's own deadline (1700 s) + shutdown
def test_thirty_minutes_in_one_session_at_flat_memory(tiny_model: Any) -> None:
    options = {k: v for k, v in TINY_GEOMETRY.items() if k not in ("emit_empty_deltas", "exact_rope_tables")}
    h = Harness(tiny_model, {"dtype": "float32", "max_model_len": SMALL, **options})
    pcm = speech(MINUTES * 60.0)
    samples: list[dict[str, int]] = []
    blocks: list[int] = []
    state = {"tokens": 0, "closed": None}

    async def go() -> None:
        session = await h.engine.open_session("long", "en")

        async def read() -> None:
            async for out in session.outputs():  # count, don't keep: this process's RSS is measured too
                if isinstance(out, Diagnostic):
                    assert out.kind == "reanchor", out
                    blocks.append(int(re.search(r"(\d+) KV blocks live", out.message).group(1)))  # type: ignore[union-attr]
                    samples.append(rss_by_process())
                elif isinstance(out, Closed):
                    state["closed"] = out.audio_ms
                else:
                    state["tokens"] += len(getattr(out, "token_ids", ()))

        import asyncio

        reader = asyncio.create_task(read())
        step = 320 * 32
        for i in range(0, len(pcm), step):
            await session.push_audio(pcm[i:i + step], True)
        await session.close()
        await reader

    try:
        h.run(go(), timeout=1700)
    finally:
        h.close()
    assert state["closed"] == MINUTES * 60_000, "the session ended early or lost audio"
    assert len(samples) >= 50, f"only {len(samples)} re-anchors"
    assert len(set(blocks)) == 1, f"KV blocks held changed across events: {sorted(set(blocks))}"
    settled = samples[WARM_UP_EVENTS:]
    for name in settled[0]:
        first = settled[0][name]
        peak = max(s[name] for s in settled)
        last = settled[-1][name]
        print(f"{name}: {first / 2**20:.1f} MiB after warm-up, peak {peak / 2**20:.1f}, last {last / 2**20:.1f}")
        assert (last - first) / first < 0.01, f"{name} RSS drifted {100 * (last - first) / first:.2f} %"
    assert {"VLLM::EngineCore", "VLLM::Worker"} <= set(settled[0])
