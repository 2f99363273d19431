"""Each realtime step's prompt, made into vLLM's engine input: by vLLM's generic renderer, or directly.

Every 80 ms step of every stream is one `TokensPrompt` (a token or the streaming prefix, plus one audio
frame) that `AsyncLLM` needs as a `MultiModalInput`. vLLM's realtime server renders it with the generic
renderer: a thread-pool hop, the HF processor (which tokenizes a dummy text and wraps the frame in a tensor)
and the multimodal bookkeeping. Profiled in the sidecar, that is a third to a half of a stream's front-end
CPU (docs/benchmarks.md). For Voxtral realtime the outcome is fixed by vLLM's own code
(`VoxtralRealtimeMultiModalProcessor`: no cache, prompt ids unchanged, one audio item whose placeholder
covers `num_audio_tokens(len(frame))` tokens from offset 0, the frame as a float32 tensor), so "direct"
builds the same input with vLLM's own types on the event loop. At start-up both are run on the same
prompts and compared; if they differ (a vLLM that renders differently), the engine uses vLLM's renderer and
says so.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import numpy as np
import structlog

from engine_api.audio import SAMPLE_RATE_HZ

log = structlog.get_logger("voxtral")

# A step's prompt (vLLM's TokensPrompt) -> its engine input (vLLM's MultiModalInput); `tag` names the
# step uniquely among every request of the engine core (the encoder cache is keyed by it).
Render = Callable[[dict[str, Any], str], Awaitable[Any]]
MODES = ("direct", "vllm")


def vllm_render(llm: Any) -> Render:
    """vLLM's own path, exactly as its realtime server takes it."""
    from vllm.renderers.inputs.preprocess import parse_model_prompt

    config = llm.model_config

    async def render(prompt: dict[str, Any], tag: str) -> Any:
        (engine_input,) = await llm.renderer.render_cmpl_async([parse_model_prompt(config, prompt)])
        return engine_input

    return render


class DirectRender:
    """The same engine input, built in place: no thread pool, no HF processor. `frame()` gives a step's audio
    item and placeholder alone, for the step driver, which needs no engine input for a later step."""

    def __init__(self, llm: Any) -> None:
        from vllm.multimodal.inputs import MultiModalFieldConfig

        self._audio_config = llm.renderer.tokenizer.instruct.audio_encoder.audio_config
        self._field = MultiModalFieldConfig.batched("audio").field  # what vLLM's processor declares for it

    def frame(self, prompt: dict[str, Any]) -> tuple[Any, Any]:
        """The step's audio as vLLM's one multimodal item (a float32 tensor) and its placeholder."""
        import torch
        from vllm.multimodal.inputs import MultiModalFieldElem, MultiModalKwargsItem, PlaceholderRange

        frame, rate = prompt["multi_modal_data"]["audio"]
        if rate not in (None, SAMPLE_RATE_HZ):  # vLLM would resample; the buffer never asks for it
            raise ValueError(f"a realtime frame at {rate} Hz; the direct renderer takes {SAMPLE_RATE_HZ} Hz")
        samples = np.asarray(frame, dtype=np.float32).ravel()
        item = MultiModalKwargsItem(
            {"audio_arrays": MultiModalFieldElem(data=torch.from_numpy(samples), field=self._field)}
        )
        return item, PlaceholderRange(offset=0, length=self._audio_config.num_audio_tokens(len(samples)))

    async def __call__(self, prompt: dict[str, Any], tag: str) -> Any:
        from vllm.inputs.engine import mm_input
        from vllm.multimodal.inputs import MultiModalKwargsItems

        item, placeholder = self.frame(prompt)
        engine_input = mm_input(
            prompt_token_ids=list(prompt["prompt_token_ids"]),
            mm_kwargs=MultiModalKwargsItems({"audio": [item]}),
            mm_hashes={"audio": [tag]},
            mm_placeholders={"audio": [placeholder]},
        )
        engine_input["arrival_time"] = time.time()
        return engine_input


def comparable(engine_input: Mapping[str, Any]) -> dict[str, Any]:
    """An engine input with what is meant to differ left out (the per-step tag, the arrival time) and its
    tensors as plain values, so two renderings compare with ==."""
    out: dict[str, Any] = {}
    for key, value in engine_input.items():
        if key in ("mm_hashes", "arrival_time"):
            continue
        if key == "mm_kwargs":
            value = {
                modality: [
                    {
                        name: (
                            type(elem.field).__name__,
                            repr(elem.field),
                            str(elem.data.dtype),
                            tuple(elem.data.shape),
                            elem.data.numpy().tobytes(),
                        )
                        for name, elem in item.items()
                    }
                    for item in items
                ]
                for modality, items in value.items()
            }
        out[key] = value
    return out


async def differences(llm: Any, prompts: Iterable[dict[str, Any]]) -> list[str]:
    """Where the direct renderer's input differs from vLLM's for these prompts (empty: identical)."""
    ours, theirs = DirectRender(llm), vllm_render(llm)
    found: list[str] = []
    for i, prompt in enumerate(prompts):
        a = comparable(await ours(prompt, f"voxgate-render-check-{i}"))
        b = comparable(await theirs(prompt, ""))
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                found.append(f"step {i}: {key} differs")
    return found


def sample_prompts(llm: Any) -> list[dict[str, Any]]:
    """A first step (the streaming prefix, left padding and audio) and a later one (one token, one frame),
    shaped as vLLM's realtime buffer shapes them."""
    tokenizer = llm.renderer.tokenizer
    encoder = tokenizer.instruct.audio_encoder
    prefix = list(tokenizer.instruct.start() + encoder.encode_streaming_tokens())
    per_tok = encoder.audio_config.raw_audio_length_per_tok
    rng = np.random.default_rng(0)
    first = (rng.standard_normal(len(prefix) * per_tok) * 0.1).astype(np.float32)
    later = (rng.standard_normal(2 * per_tok) * 0.1).astype(np.float32)[: 2 * per_tok - 3]
    return [
        {"prompt_token_ids": prefix, "multi_modal_data": {"audio": (first, None)}},
        {"prompt_token_ids": [prefix[-1]], "multi_modal_data": {"audio": (later, None)}},
    ]


async def choose(llm: Any, mode: str) -> tuple[Render, str]:
    """The renderer to use and the mode in effect: "direct" only where it renders what vLLM renders."""
    if mode == "vllm":
        return vllm_render(llm), "vllm"
    try:
        problems = await differences(llm, sample_prompts(llm))
    except Exception as exc:  # a vLLM whose types moved: its own renderer still works
        problems = [f"{type(exc).__name__}: {exc}"]
    if problems:
        log.warning("chunk_render_fallback", wanted=mode, used="vllm", problems=problems[:4])
        return vllm_render(llm), "vllm"
    return DirectRender(llm), "direct"
