"""Long sessions on a small max_model_len with re-anchoring off: rollover, not silent truncation;
and flat engine memory."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from engine_sidecar.engines.voxtral.session import VoxtralSession
from tests.engine.conftest import Harness, Result, engine_children, noise, stream

pytest.importorskip("vllm")

MAX_MODEL_LEN = 256  # ~17 s of audio per engine request


@pytest.fixture(scope="module")
def h(make_harness: Any) -> Harness:
    # Rollover is what `--no-reanchor` (or a failed re-anchoring guard) leaves: tested here on its own.
    return make_harness(
        max_model_len=MAX_MODEL_LEN,
        max_num_seqs=4,
        emit_empty_deltas=True,
        rollover_silence_window_s=8.0,
        reanchor=False,
    )


def speech_with_pauses(at_ms: int) -> bool:
    """VAD flags: 1 s of silence every 6 s."""
    return at_ms % 6000 < 5000


def check_continuous(r: Result, audio_ms: int) -> None:
    assert r.closed is not None and r.closed.audio_ms == audio_ms
    ends = [d.end_ms for d in r.deltas]
    assert ends == sorted(ends), "time offsets must continue across rollovers"
    assert ends[-1] == audio_ms
    # Every 80 ms of audio got its token: nothing was dropped at a request boundary.
    covered = {d.start_ms // 80 for d in r.deltas}
    assert len(covered) >= audio_ms // 80 - 2 * (len(r.diagnostics) + 1)


def test_reanchoring_turned_off_is_rollover_and_says_so(h: Harness) -> None:
    assert h.engine.info.position_mode == "rollover"
    assert "--no-reanchor" in h.engine.info.position_mode_reason
    assert h.engine.counters()["reanchor_active"] == 0


def test_session_past_max_model_len_rolls_over_inside_silences(h: Harness) -> None:
    audio_ms = 50_000
    before = h.engine.counters().get("rollovers", 0)

    async def go() -> tuple[Result, Result, Result]:
        long_s = await h.engine.open_session("long", "en")
        other = await h.engine.open_session("other", "en")
        short = noise(4.0, seed=6)
        together = await asyncio.gather(
            stream(long_s, noise(audio_ms / 1000, seed=5), chunk_ms=160, speech=speech_with_pauses),
            stream(other, short, chunk_ms=80, start_delay_s=0.5),
        )
        alone = await stream(await h.engine.open_session("alone", "en"), short)
        return together[0], together[1], alone

    long_r, other_r, alone_r = h.run(go())
    check_continuous(long_r, audio_ms)
    rollovers = [d for d in long_r.diagnostics if d.kind == "rollover"]
    assert len(rollovers) >= 3
    assert all(not speech_with_pauses(d.at_ms) for d in rollovers), "rolled over inside speech"
    assert h.engine.counters()["rollovers"] - before == len(rollovers)
    assert other_r.token_ids == alone_r.token_ids, "another session must not notice"


def test_rollover_at_the_cap_when_no_silence_comes(h: Harness) -> None:
    audio_ms = 40_000
    r = h.run(stream_session(h, noise(audio_ms / 1000, seed=7), chunk_ms=320, speech=True))
    check_continuous(r, audio_ms)
    cap_ms = h.engine._ctx.rollover.cap_samples // 16  # type: ignore[union-attr]
    assert [d.at_ms for d in r.diagnostics] == [cap_ms, 2 * cap_ms]


async def stream_session(h: Harness, pcm: bytes, **kwargs: Any) -> Result:
    return await stream(await h.engine.open_session("s", "en"), pcm, **kwargs)


def test_blank_rut_over_speech_is_recovered(h: Harness) -> None:
    """A biased blank logit makes the tiny model emit only blanks: a scripted rut."""
    ctx = h.engine._ctx
    assert ctx is not None
    rut_ctx = dataclasses.replace(
        ctx,
        options=dataclasses.replace(ctx.options, rut_blank_frames=25),
        probes=dataclasses.replace(ctx.probes, blank_logit_bias=100.0),
    )
    before = h.engine.counters().get("rut_recoveries", 0)

    async def go() -> Result:
        ctx.counters.sessions_total += 1
        ctx.counters.sessions_active += 1
        return await stream(VoxtralSession(rut_ctx, "rut"), noise(8.0, seed=8), speech=True)

    r = h.run(go())
    assert r.closed is not None
    assert {d.token_ids for d in r.deltas} == {(ctx.geometry.blank_token_id,)}
    kinds = [d.kind for d in r.diagnostics]
    assert kinds and set(kinds) == {"rut_recovery"}
    assert h.engine.counters()["rut_recoveries"] - before == len(kinds)


def test_engine_memory_stays_flat_over_a_long_session(h: Harness) -> None:
    def rss_mib() -> dict[str, float]:
        return {p.name(): p.memory_info().rss / 2**20 for p in engine_children() if "VLLM" in p.name()}

    h.run(stream_session(h, noise(20.0, seed=9), chunk_ms=320))  # warm up allocators
    start = rss_mib()
    h.run(stream_session(h, noise(150.0, seed=10), chunk_ms=320, speech=speech_with_pauses))  # ~1900 tokens
    end = rss_mib()
    assert set(start) >= {"VLLM::EngineCore", "VLLM::Worker"}
    for name, mib in start.items():
        # Measured here: +3 MiB with mm_processor_cache_gb=0; vLLM's default receiver cache adds
        # ~10 KB per token (~18 MiB over this session) to the EngineCore.
        assert end[name] - mib < 8, (name, start, end)
