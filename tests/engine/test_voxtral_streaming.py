"""Streaming on the real vLLM path: timing, determinism, parity, flush, abort."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from engine_api.outputs import Closed, Flushed
from tests.engine.conftest import Harness, Result, noise, stream

pytest.importorskip("vllm")

FRAME_MS = 80


@pytest.fixture(scope="module")
def h(make_harness: Any) -> Harness:
    return make_harness(max_model_len=1024, max_num_seqs=4, emit_empty_deltas=True)


def run_one(h: Harness, pcm: bytes, **kwargs: Any) -> Result:
    async def go() -> Result:
        return await stream(await h.engine.open_session("s", "en"), pcm, **kwargs)

    return h.run(go())


def test_engine_info_comes_from_the_model(h: Harness) -> None:
    info = h.engine.info
    assert (info.name, info.frame_ms, info.transcription_delay_ms) == ("voxtral", 80, 480)
    assert info.max_sessions == 4  # capped by max_num_seqs: one engine request per session


def test_tokens_carry_increasing_audio_times(h: Harness) -> None:
    audio_ms = 6000
    r = run_one(h, noise(audio_ms / 1000), flush_at_ms=3000)
    g = h.engine._ctx.geometry  # type: ignore[union-attr]
    # One token per step the buffer serves: the first takes P frames, each later one a frame, and the
    # look-ahead (2.5 ms) keeps the very last padded frame from being served.
    frames = (g.left_pad_frames + audio_ms // FRAME_MS + g.right_pad_frames) - g.prompt_tokens
    assert len(r.deltas) == frames
    ends = [d.end_ms for d in r.deltas]
    assert ends == sorted(ends)
    for k, d in enumerate(r.deltas[: audio_ms // FRAME_MS]):
        assert (d.start_ms, d.end_ms) == (k * FRAME_MS, (k + 1) * FRAME_MS)
    assert all(d.end_ms <= audio_ms for d in r.deltas)  # right-padding tokens are clamped to the audio
    assert r.closed == Closed(audio_ms=audio_ms)
    assert [f.marker for f in r.flushes] == [7, 0]
    flush_at = r.outputs.index(r.flushes[0])
    assert all(d.start_ms < r.flushes[0].audio_ms for d in r.outputs[:flush_at] if hasattr(d, "start_ms"))
    # Flushed(7) waits for the tokens covering its audio, no longer.
    covering = [i for i, o in enumerate(r.outputs) if hasattr(o, "end_ms") and o.end_ms >= r.flushes[0].audio_ms]
    assert flush_at == covering[0] + 1


def test_deterministic_and_identical_for_chunk_sizes_20_80_320(h: Harness) -> None:
    pcm = noise(4.0, seed=1)
    runs = {ms: run_one(h, pcm, chunk_ms=ms).token_ids for ms in (20, 80, 320)}
    assert runs[20] == runs[80] == runs[320]
    assert run_one(h, pcm).token_ids == runs[80]
    assert len(set(runs[80])) > 5, "a degenerate model would make this test meaningless"


def test_session_alone_equals_session_beside_three_others(h: Harness) -> None:
    pcm = noise(5.0, seed=2)
    alone = run_one(h, pcm).token_ids

    async def together() -> list[Result]:
        sessions = [await h.engine.open_session(f"c{i}", "en") for i in range(4)]
        return await asyncio.gather(
            stream(sessions[0], pcm, chunk_ms=80, pace_s=0.01),
            *(
                stream(
                    s,
                    noise(3.0 + i, seed=10 + i),
                    chunk_ms=(40, 160, 240)[i],
                    pace_s=0.02,
                    start_delay_s=0.15 * (i + 1),
                )
                for i, s in enumerate(sessions[1:])
            ),
        )

    results = h.run(together())
    assert results[0].token_ids == alone
    assert all(r.closed is not None for r in results)
    assert h.engine.counters()["sessions_active"] == 0


def test_abort_leaves_no_request_in_the_engine(h: Harness) -> None:
    engine = h.engine

    async def abort_midway() -> list[Any]:
        session = await engine.open_session("gone", "en")
        outputs: list[Any] = []
        first = asyncio.Event()

        async def read() -> None:
            async for out in session.outputs():
                outputs.append(out)
                first.set()

        reader = asyncio.create_task(read())
        pcm = noise(3.0, seed=3)
        for i in range(0, len(pcm), 2560):
            await session.push_audio(pcm[i : i + 2560], True)
        await first.wait()  # the engine request is live: abort it mid-stream
        await session.abort()
        await reader
        return outputs

    outputs = h.run(abort_midway())
    assert outputs and not any(isinstance(o, (Closed, Flushed)) for o in outputs)
    assert engine.counters()["engine_unfinished"] == 0  # vLLM's front end holds nothing for it
    # The scheduler's own view, from the stats of a probe session's steps: while the probe runs, only the
    # probe is there (sampled at each of its outputs; after it ends the last stats may show 0 or 1).
    seen: list[int] = []

    async def probe() -> Any:
        session = await engine.open_session("probe", "en")

        async def read() -> Any:
            last = None
            async for out in session.outputs():
                seen.append(engine.scheduler.requests)
                last = out
            return last

        reader = asyncio.create_task(read())
        pcm = noise(1.5, seed=4)
        for i in range(0, len(pcm), 2560):
            await session.push_audio(pcm[i : i + 2560], True)
        await session.close()
        return await reader

    assert isinstance(h.run(probe()), Closed)
    assert seen and max(seen) == 1, seen
    assert engine.counters()["engine_unfinished"] == 0
    assert engine.counters()["sessions_active"] == 0


# Each 80 ms step's engine input: built directly (the default) or by vLLM's renderer (chunk_render.py).


def realtime_prompts(h: Harness, pcm: bytes, steps: int) -> list[dict[str, Any]]:
    """The first step prompts vLLM's own realtime buffer makes of this audio (the first carries the prefix),
    in frames that do not fall on the model's 80 ms."""
    import numpy as np

    from engine_sidecar.engines.voxtral.steps import vllm_prompts

    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
    chunks = [samples[i : i + 1333] for i in range(0, len(samples), 1333)]
    return h.run(vllm_prompts(h.engine._ctx.model_cls, h.engine._ctx.llm.model_config, chunks))[:steps]


def test_direct_step_inputs_equal_vllms_renderer(h: Harness) -> None:
    from engine_sidecar.engines.voxtral import chunk_render

    assert isinstance(h.engine._ctx.render, chunk_render.DirectRender)
    prompts = realtime_prompts(h, noise(3.0, seed=4), steps=30)
    assert len(prompts) == 30 and len(prompts[0]["prompt_token_ids"]) > 1  # the prefix step is among them
    assert h.run(chunk_render.differences(h.engine._ctx.llm, prompts)) == []

    # The comparison sees a difference where there is one: a frame one sample short renders differently.
    frame, rate = prompts[3]["multi_modal_data"]["audio"]
    shorter = {**prompts[3], "multi_modal_data": {"audio": (frame[:-1], rate)}}
    ours = h.run(chunk_render.DirectRender(h.engine._ctx.llm)(shorter, "t"))
    theirs = h.run(chunk_render.vllm_render(h.engine._ctx.llm)(prompts[3], ""))
    assert chunk_render.comparable(ours) != chunk_render.comparable(theirs)


def test_direct_and_vllm_step_inputs_give_the_same_tokens(h: Harness, make_harness: Any) -> None:
    by_vllm = make_harness(max_model_len=1024, max_num_seqs=4, emit_empty_deltas=True, chunk_render="vllm")
    assert by_vllm.engine._ctx.render is not None
    assert by_vllm.engine._ctx.render.__qualname__.startswith("vllm_render")
    pcm = noise(4.0, seed=9)
    direct, vllm = run_one(h, pcm).token_ids, run_one(by_vllm, pcm).token_ids
    assert direct == vllm
    assert len(set(direct)) > 5, "a degenerate model would make this test meaningless"


# How the steps reach vLLM: from the request's own task (the default where checked equal) or generate().


def test_the_direct_driver_makes_vllms_steps_and_requests(h: Harness) -> None:
    from engine_sidecar.engines.voxtral import chunk_render, step_driver, steps
    from engine_sidecar.engines.voxtral.stream import request_params

    assert h.engine._ctx.direct_tasks is not None, "the direct step driver should be in effect"
    llm, model_cls = h.engine._ctx.llm, h.engine._ctx.model_cls
    chunks = steps.sample_audio(3.0, seed=5)
    ours = steps.our_prompts(model_cls, llm.model_config, chunks)
    theirs = h.run(steps.vllm_prompts(model_cls, llm.model_config, chunks))
    assert len(ours) > 30 and steps.compare(ours, theirs) == []
    # ... and the comparison sees a difference where there is one: one sample fewer, one step's token changed.
    assert steps.compare(steps.our_prompts(model_cls, llm.model_config, [*chunks[:-1], chunks[-1][:-1]]), theirs)
    assert steps.compare([*ours[:5], {**ours[5], "prompt_token_ids": [1]}, *ours[6:]], theirs) == [
        "step 5: prompt tokens differ"
    ]

    render = h.engine._ctx.render
    params = request_params(model_cls, {3: 1.5}, "voxgate-x")
    # later steps straight from the prompt (the direct renderer's frame parts), and through vLLM's renderer
    assert h.run(step_driver.differences(llm, render, params)) == []
    assert h.run(step_driver.differences(llm, chunk_render.vllm_render(llm), params)) == []
    # A derived request that missed a field would go to the engine core differently.
    first, later = chunk_render.sample_prompts(llm)
    req = step_driver.DirectRequest(llm, h.engine._ctx.direct_tasks, "t", params, asyncio.Event(), render)
    h.run(req.request(first, "t-0"))
    derived, other = h.run(req.request(later, "t-1")), h.run(req.request({**later, "prompt_token_ids": [5]}, "t-1"))
    other.arrival_time = derived.arrival_time
    assert step_driver.wire(derived) != step_driver.wire(other)
    frame = later["multi_modal_data"]["audio"][0]
    shorter = h.run(req.request({**later, "multi_modal_data": {"audio": (frame[:-1], None)}}, "t-1"))
    shorter.arrival_time = derived.arrival_time
    assert step_driver.wire(derived) != step_driver.wire(shorter)


def test_the_direct_driver_gives_vllms_outputs_and_finish(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    from engine_sidecar.engines.voxtral import driver_check, step_driver
    from engine_sidecar.engines.voxtral.steps import RealtimeSteps

    ctx = h.engine._ctx
    assert ctx is not None and ctx.direct_tasks is not None

    def check(timeout_s: float | None = None) -> list[str]:
        return h.run(
            driver_check.output_differences(
                ctx.llm, ctx.model_cls, ctx.render, ctx.token_pieces, ctx.direct_tasks, timeout_s=timeout_s
            )
        )

    ours = h.run(driver_check.run_once(
        ctx.llm, ctx.model_cls, ctx.render, ctx.token_pieces, ctx.direct_tasks, driver_check.check_audio(), 60
    ))  # fmt: skip
    assert ours.finished and len(ours.token_ids) > 5 and len(set(ours.token_ids)) > 2
    assert check() == []
    # Drift in what comes back is seen: an end of audio that loses the right padding's last words ...
    monkeypatch.setattr(RealtimeSteps, "end_audio", lambda self: setattr(self, "_audio_ended", True))
    cut = check()
    assert cut[0].endswith(f" tokens by the direct driver, {len(ours.token_ids)} by vLLM's path"), cut
    monkeypatch.undo()
    # ... and an end of input that no longer finishes the request (its abort leaves nothing behind).
    monkeypatch.setattr(step_driver.DirectRequest, "finish", lambda self: asyncio.sleep(0))
    assert check(timeout_s=3) == ["the direct driver did not finish within 3 s of the end of its audio"]
    monkeypatch.undo()
    assert h.engine.counters()["engine_unfinished"] == 0
    # The same check chooses the driver at start-up: a release whose path drifted gets vLLM's own.
    from engine_sidecar.engines.voxtral.vllm_window.versions import RELEASES

    release = RELEASES["0.32"]
    assert (
        h.run(driver_check.choose(ctx.llm, ctx.model_cls, ctx.render, ctx.token_pieces, "direct", release)) == "direct"
    )
    monkeypatch.setattr(step_driver.DirectRequest, "finish", lambda self: asyncio.sleep(0))
    monkeypatch.setattr(driver_check, "CHECK_TIMEOUT_S", 3.0)
    assert h.run(driver_check.choose(ctx.llm, ctx.model_cls, ctx.render, ctx.token_pieces, "direct", release)) == "vllm"


def test_the_direct_steps_equal_vllms_for_any_chunking(h: Harness) -> None:
    import numpy as np

    from engine_sidecar.engines.voxtral import steps

    llm, model_cls = h.engine._ctx.llm, h.engine._ctx.model_cls
    audio = np.concatenate(steps.sample_audio(2.5, seed=8))
    rng = np.random.default_rng(3)
    cases = {
        f"up to {n - 1} samples": np.split(audio, (c := np.cumsum(rng.integers(1, n, size=len(audio))))[c < len(audio)])
        for n in (2, 50, 700, 1333, 4000, 16000)
    }
    for name, chunks in {**cases, "all in one chunk": [audio], "no audio at all": []}.items():
        ours = steps.our_prompts(model_cls, llm.model_config, chunks)
        theirs = h.run(steps.vllm_prompts(model_cls, llm.model_config, chunks))
        assert steps.compare(ours, theirs) == [], name


def test_one_huge_chunk_is_not_copied_whole_per_step(h: Harness) -> None:
    """A minute pushed at once: what the stepper holds back between steps stays look-back + look-ahead long,
    instead of the rest of the chunk being copied at every step (quadratic in the chunk's length)."""
    import numpy as np

    from engine_sidecar.engines.voxtral import steps

    llm, model_cls = h.engine._ctx.llm, h.engine._ctx.model_cls
    stepper = steps.make_steps(model_cls, llm.model_config)
    stepper.add_audio(np.zeros(60 * 16000, dtype=np.float32))
    held_back, n = [], 0
    while isinstance(stepper.next_prompt(), dict):
        held_back.append(len(stepper._leftover))
        n += 1
        stepper.add_token(7)
    assert n > 50 and max(held_back) == stepper._look_back + stepper._look_ahead


def test_direct_and_vllm_step_drivers_give_the_same_tokens(h: Harness, make_harness: Any) -> None:
    by_vllm = make_harness(max_model_len=1024, max_num_seqs=4, emit_empty_deltas=True, step_driver="vllm")
    assert by_vllm.engine._ctx.direct_tasks is None
    pcm = noise(5.0, seed=11)
    direct, vllm = run_one(h, pcm), run_one(by_vllm, pcm)
    assert direct.token_ids == vllm.token_ids
    assert len(set(direct.token_ids)) > 5, "a degenerate model would make this test meaningless"


# Each token's text: our cached pieces (the default where checked equal) or vLLM's detokenizer.


def test_own_token_text_equals_vllms_detokenizer(h: Harness) -> None:
    from engine_sidecar.engines.voxtral import steps, token_text

    pieces = h.engine._ctx.token_pieces
    assert pieces is not None, "our own token text should be in effect"
    llm = h.engine._ctx.llm
    tokenizer, prompt = llm.renderer.tokenizer, steps.prompt_tokens(llm.model_config)
    for seed in range(4):  # specials, single bytes (UTF-8 lead and continuation bytes), merged pieces
        ids = token_text.sample_ids(len(tokenizer), tokenizer.tokenizer.num_special_tokens, 5000, seed)
        theirs = token_text.vllm_texts(tokenizer, prompt, ids)
        assert token_text.own_texts(pieces, ids) == theirs, seed
        assert sum(map(bool, theirs)) > 1000 and any("\ufffd" in t for t in theirs), "every path was taken"
    # ... and the comparison sees a difference where there is one: a byte token given out at once.
    byte = next(
        i
        for i in range(tokenizer.tokenizer.num_special_tokens, len(tokenizer))
        if (p := pieces.get(i)) is not None and not p[0]
    )
    wrong = token_text.TokenPieces(tokenizer)
    wrong._cache[byte] = ("\ufffd", pieces.get(byte)[1])  # type: ignore[index]
    assert token_text.differences(tokenizer, wrong, prompt)
    assert token_text.differences(tokenizer, pieces, prompt) == []


def test_own_and_vllm_token_text_give_the_same_deltas(h: Harness, make_harness: Any) -> None:
    by_vllm = make_harness(max_model_len=1024, max_num_seqs=4, emit_empty_deltas=True, detokenizer="vllm")
    assert by_vllm.engine._ctx.token_pieces is None
    pcm = noise(6.0, seed=12)
    ours, theirs = run_one(h, pcm), run_one(by_vllm, pcm)
    assert [(d.text, d.token_ids) for d in ours.deltas] == [(d.text, d.token_ids) for d in theirs.deltas]
    assert sum(bool(d.text) for d in ours.deltas) > 10, "a model that says nothing would make this meaningless"


def test_the_scheduler_snapshot_stands_in_for_vllms_unserved_prometheus_logger(h: Harness) -> None:
    from vllm.v1.metrics.loggers import PrometheusStatLogger

    steps = h.engine.scheduler.steps
    run_one(h, noise(1.0, seed=2))
    assert h.engine.scheduler.steps > steps  # it still sees every engine step
    manager = h.engine._ctx.llm.logger_manager
    prometheus = [x for x in manager.stat_loggers if isinstance(x, PrometheusStatLogger)]
    assert [type(x).__name__ for x in prometheus] == ["SnapshotLogger"]  # vLLM's own was not added


def test_the_front_end_keeps_no_statistics_nobody_reads(h: Harness) -> None:
    """A custom stat logger makes vLLM keep per-request and per-output stats in the front end; ours reads the
    scheduler's only: those are off, while the engine core's scheduler stats still reach the snapshot."""
    from vllm.v1.metrics.stats import IterationStats

    llm = h.engine._ctx.llm
    assert not llm.log_stats and not llm.output_processor.log_stats
    filled: list[int] = []
    original = IterationStats.update_from_output
    IterationStats.update_from_output = lambda self, *a, **k: filled.append(1)  # type: ignore[method-assign]
    try:
        steps = h.engine.scheduler.steps
        run_one(h, noise(1.0, seed=3))
    finally:
        IterationStats.update_from_output = original  # type: ignore[method-assign]
    assert filled == [] and h.engine.scheduler.steps > steps


# A session-long request's token lists in vLLM's front end (engine_sidecar/engines/voxtral/request_memory.py).


def held_by_front_end(h: Harness) -> list[int]:
    from engine_sidecar.engines.voxtral.request_memory import held_ids

    return [held_ids(state) for state in h.engine._ctx.llm.output_processor.request_states.values()]


def long_session_holding(h: Harness, seconds: float) -> tuple[int, list[int]]:
    """One session of `seconds` of noise fed as fast as the engine takes it: its tokens, and the ids its
    request state in vLLM's front end held, sampled every 40 outputs while it ran."""
    held: list[int] = []

    async def go() -> int:
        session = await h.engine.open_session("long", "en")
        tokens = 0

        async def read() -> None:
            nonlocal tokens
            async for out in session.outputs():
                tokens += len(getattr(out, "token_ids", ()))
                if tokens % 40 == 0:
                    held.extend(held_by_front_end(h))

        reader = asyncio.create_task(read())
        pcm = noise(seconds, seed=13)
        for i in range(0, len(pcm), 320 * 32):
            await session.push_audio(pcm[i : i + 320 * 32], True)
        await session.close()
        await reader
        return tokens

    return h.run(go()), held


@pytest.mark.parametrize("driver", ["direct", "vllm"])
def test_the_front_end_holds_a_bounded_tail_of_a_long_requests_token_ids(
    h: Harness, make_harness: Any, driver: str
) -> None:
    """vLLM's front end appends every step's prompt token and every output token to the request's state;
    a realtime request lives as long as its session, so both lists are bounded (else ~25 ids per second)."""
    from engine_sidecar.engines.voxtral.request_memory import HELD_IDS_CEILING

    engine = h if driver == "direct" else make_harness(max_model_len=1024, max_num_seqs=4, step_driver="vllm")
    assert (engine.engine._ctx.direct_tasks is None) == (driver == "vllm")
    tokens, held = long_session_holding(engine, 52.0)
    # unbounded, the two lists would hold about 2 ids per token
    assert 2 * tokens > 3 * HELD_IDS_CEILING, "too short a session to tell a bounded list from a growing one"
    assert held and max(held) <= HELD_IDS_CEILING, f"the front end held {max(held)} token ids of one request"
    assert held_by_front_end(engine) == [], "the ended request's state is gone"
