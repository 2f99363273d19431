"""Minutes of audio in one session on a tiny max_model_len: ≥ 50 re-anchors at constant memory.

CI runs 12 minutes of audio (~66 re-anchors, ~4 minutes on an AVX2 runner); `make soak-memory` runs half an
hour (VOXGATE_MEMORY_TEST_MINUTES, ~165 re-anchors, ~10 minutes there). Fed as fast as the engine takes it.
Memory is sampled at every re-anchor: the KV blocks the session holds, and the RSS of every process (this one,
which owns AsyncLLM like the sidecar, the EngineCore and the Worker), and the token ids the request's state
in vLLM's front end holds (bounded by request_memory.py; RSS would not see them grow within 1 %). vLLM's
multimodal receiver cache is off (mm_processor_cache_gb=0, as the voxtral engine always sets it): with it on,
the EngineCore would grow ~11-14 KB per token.
"""

from __future__ import annotations

import os
import re
from typing import Any

import psutil
import pytest

from engine_api.outputs import Closed, Diagnostic
from engine_sidecar.engines.voxtral.request_memory import HELD_IDS_CEILING, held_ids
from tests.engine.conftest import Harness
from tests.engine.test_reanchor import SMALL, TINY_GEOMETRY, speech

pytest.importorskip("vllm")

MINUTES = int(os.environ.get("VOXGATE_MEMORY_TEST_MINUTES", "12"))
WARM_UP_EVENTS = 10
SESSION_DEADLINE_S = 60.0 * MINUTES + 120  # ~3x the AVX2 runner's pace


def rss_by_process() -> dict[str, int]:
    me = psutil.Process(os.getpid())
    out = {"front end": me.memory_info().rss}
    for child in me.children(recursive=True):
        if child.name().startswith("VLLM::"):
            out[child.name()] = child.memory_info().rss
    return out


@pytest.mark.timeout(240 + SESSION_DEADLINE_S + 120)  # vLLM start + the session's own deadline + shutdown
def test_one_long_session_reanchors_at_flat_memory(tiny_model: Any) -> None:
    options = {k: v for k, v in TINY_GEOMETRY.items() if k not in ("emit_empty_deltas", "exact_rope_tables")}
    h = Harness(tiny_model, {"dtype": "float32", "max_model_len": SMALL, **options})
    pcm = speech(MINUTES * 60.0)
    samples: list[dict[str, int]] = []
    blocks: list[int] = []
    held: list[int] = []  # token ids the request's state in vLLM's front end holds, at each re-anchor
    tokens_at: list[Any] = []  # tokens received by each re-anchor
    state = {"tokens": 0, "closed": None}

    async def go() -> None:
        session = await h.engine.open_session("long", "en")

        async def read() -> None:
            async for out in session.outputs():  # count, don't keep: this process's RSS is measured too
                if isinstance(out, Diagnostic):
                    assert out.kind == "reanchor", out
                    blocks.append(int(re.search(r"(\d+) KV blocks live", out.message).group(1)))  # type: ignore[union-attr]
                    samples.append(rss_by_process())
                    tokens_at.append(state["tokens"])
                    held.extend(held_ids(st) for st in h.engine._ctx.llm.output_processor.request_states.values())
                elif isinstance(out, Closed):
                    state["closed"] = out.audio_ms
                else:
                    state["tokens"] += len(getattr(out, "token_ids", ()))

        import asyncio

        reader = asyncio.create_task(read())
        step = 320 * 32
        for i in range(0, len(pcm), step):
            await session.push_audio(pcm[i : i + step], True)
        await session.close()
        await reader

    try:
        h.run(go(), timeout=SESSION_DEADLINE_S)
    finally:
        h.close()
    assert state["closed"] == MINUTES * 60_000, "the session ended early or lost audio"
    assert len(samples) >= 50, f"only {len(samples)} re-anchors"
    assert len(set(blocks)) == 1, f"KV blocks held changed across events: {sorted(set(blocks))}"
    # RSS cannot see 25 ids a second within 1 %; the lists themselves can (request_memory.py)
    assert max(held) <= HELD_IDS_CEILING, f"the front end held {max(held)} ids of the request"
    print(f"{len(samples)} re-anchors over {MINUTES} minutes of audio")
    settled = samples[WARM_UP_EVENTS:]
    for name in settled[0]:
        first = settled[0][name]
        peak = max(s[name] for s in settled)
        last = settled[-1][name]
        per_token = (last - first) / max(1, tokens_at[-1] - tokens_at[WARM_UP_EVENTS])
        # docs/reanchoring.md: EngineCore/Worker ~4/~0.5 bytes per token on tcmalloc, ~43/~84 on glibc.
        print(
            f"{name}: {first / 2**20:.1f} MiB after warm-up, peak {peak / 2**20:.1f}, last {last / 2**20:.1f}, "
            f"{per_token:.1f} bytes per token"
        )
        assert (last - first) / first < 0.01, f"{name} RSS drifted {100 * (last - first) / first:.2f} %"
    assert {"VLLM::EngineCore", "VLLM::Worker"} <= set(settled[0])
