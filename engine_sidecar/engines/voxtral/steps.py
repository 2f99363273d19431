"""A realtime request's step prompts, made synchronously from audio and fed-back tokens.

vLLM's realtime path (`VoxtralRealtimeGeneration.buffer_realtime_audio`) makes every 80 ms step's prompt
in async generators and two background tasks, with an asyncio queue for audio and one for tokens: four
task switches per step per stream, which is most of the "event loop" share of the front end's profile
(docs/benchmarks.md). `RealtimeSteps` makes the same prompts as plain method calls: audio and tokens are
appended, `next_prompt()` says what the next step is once both are there. The geometry (frame sizes,
look-back, look-ahead, the position cap) is read from vLLM's own `VoxtralRealtimeBuffer` and its padding
from Mistral's audio encoder; only the bookkeeping is ours. `differences()` runs both on the same audio
and tokens; the engine uses this only where they agree (engine_sidecar/engines/voxtral/step_driver.py).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import numpy as np

END = "end"  # next_prompt(): the request's input is over (its audio ended, or the position cap was reached)


class RealtimeSteps:
    """Audio in (left padding before the first chunk, right padding at the end), tokens in (the prompt's
    prefix first, then one per step: the token the model just produced), step prompts out."""

    def __init__(self, buffer: Any, left_pad: np.ndarray, right_pad: np.ndarray, prompt_tokens: Sequence[int]) -> None:
        self._sizes = buffer._generate_frame_size_and_num_tokens()
        self._look_ahead = buffer._look_ahead_in_samples
        self._look_back = buffer._look_back_in_samples
        self._cap = buffer._max_model_len
        self._left_pad, self._right_pad = left_pad, right_pad
        self._tokens: deque[int] = deque(prompt_tokens)
        self._audio: deque[np.ndarray] = deque()
        self._audio_samples = 0
        self._leftover: np.ndarray | None = None
        self._started = False  # a real chunk came (the left padding went before it)
        self._audio_ended = False
        self._n_tokens = 0
        self._next: tuple[int, int] | None = None
        self.ended = False

    def add_audio(self, samples: np.ndarray) -> None:
        if self._audio_ended:
            return
        if not self._started:
            self._started = True
            self._push(self._left_pad)
        self._push(samples)

    def end_audio(self) -> None:
        if not self._audio_ended:
            self._push(self._right_pad)
            self._audio_ended = True

    def add_token(self, token_id: int) -> None:
        self._tokens.append(token_id)

    def _push(self, samples: np.ndarray) -> None:
        self._audio.append(samples)
        self._audio_samples += len(samples)

    def next_prompt(self) -> dict[str, Any] | str | None:
        """The next step's prompt (vLLM's TokensPrompt), END, or None: not yet (a token or audio missing)."""
        if self.ended:
            return END
        if self._next is None:
            self._next = next(self._sizes)
            self._n_tokens += self._next[1]
            if self._cap is not None and self._n_tokens >= self._cap:
                self.ended = True
                return END
        frame_size, num_tokens = self._next
        if len(self._tokens) < num_tokens:
            return None
        held = 0 if self._leftover is None else len(self._leftover)
        if held + self._audio_samples < frame_size:
            if self._audio_ended:  # vLLM's buffer meets its end marker before the frame is full
                self.ended = True
                return END
            return None
        arrays = [] if self._leftover is None else [self._leftover]
        while held < frame_size:
            chunk = self._audio.popleft()
            self._audio_samples -= len(chunk)
            if held + len(chunk) > frame_size:  # the rest waits in the queue: no copy of it per step
                surplus = chunk[frame_size - held :]
                self._audio.appendleft(surplus)
                self._audio_samples += len(surplus)
                chunk = chunk[: frame_size - held]
            held += len(chunk)
            arrays.append(chunk)
        audio = np.concatenate(arrays)
        # vLLM's buffer keeps everything past this point as its leftover; the surplus beyond the frame is still
        # queued here, so the leftover stays look-back + look-ahead long however large a chunk came
        self._leftover = audio[frame_size - self._look_ahead - self._look_back :]
        self._next = None
        tokens = [self._tokens.popleft() for _ in range(num_tokens)]
        return {"prompt_token_ids": tokens, "multi_modal_data": {"audio": (audio[:frame_size], None)}}


def prompt_tokens(model_config: Any) -> list[int]:
    """A realtime request's prompt: the start of an instruct sequence and the streaming prefix."""
    from vllm.tokenizers import cached_tokenizer_from_config

    tokenizer = cached_tokenizer_from_config(model_config)
    return list(tokenizer.instruct.start() + tokenizer.instruct.audio_encoder.encode_streaming_tokens())


def make_steps(model_cls: Any, model_config: Any) -> RealtimeSteps:
    """A stepper with the geometry vLLM's realtime buffer would have for this model (its cap included: the
    buffer class is the one re-anchoring uncaps)."""
    from vllm.model_executor.models import voxtral_realtime
    from vllm.tokenizers import cached_tokenizer_from_config

    tokenizer = cached_tokenizer_from_config(model_config)
    encoder = tokenizer.instruct.audio_encoder
    prompt = prompt_tokens(model_config)
    left, right = encoder.get_padding_audio()
    buffer = voxtral_realtime.VoxtralRealtimeBuffer(
        encoder.audio_config, prompt, max_model_len=model_config.max_model_len
    )
    return RealtimeSteps(buffer, left.audio_array, right.audio_array, prompt)


def sample_audio(seconds: float, seed: int = 0, chunk: int = 1333) -> list[np.ndarray]:
    """Noise in chunks that do not fall on the model's 80 ms frames."""
    samples = (np.random.default_rng(seed).standard_normal(int(seconds * 16000)) * 0.1).astype(np.float32)
    return [samples[i : i + chunk] for i in range(0, len(samples), chunk)]


def _feedback(step: int) -> int:
    return 7 + step % 5  # any token will do: the prompts are compared, not what a model makes of them


async def vllm_prompts(model_cls: Any, model_config: Any, chunks: Sequence[np.ndarray]) -> list[dict[str, Any]]:
    """Every step prompt vLLM's own realtime buffer makes of these chunks, fed back fixed tokens."""
    feedback: asyncio.Queue[list[int]] = asyncio.Queue()

    async def audio() -> AsyncGenerator[np.ndarray, None]:
        for c in chunks:
            yield c

    out: list[dict[str, Any]] = []
    async for prompt in model_cls.buffer_realtime_audio(audio(), feedback, model_config):
        out.append(dict(prompt))
        feedback.put_nowait([_feedback(len(out))])
    return out


def our_prompts(model_cls: Any, model_config: Any, chunks: Sequence[np.ndarray]) -> list[dict[str, Any]]:
    """The same through RealtimeSteps."""
    steps = make_steps(model_cls, model_config)
    for c in chunks:
        steps.add_audio(c)
    steps.end_audio()
    out: list[dict[str, Any]] = []
    while isinstance(prompt := steps.next_prompt(), dict):
        out.append(prompt)
        steps.add_token(_feedback(len(out)))
    return out


def compare(ours: Sequence[dict[str, Any]], theirs: Sequence[dict[str, Any]]) -> list[str]:
    """Where two step sequences differ (empty: the same steps, tokens and audio)."""
    found = [f"{len(ours)} steps vs vLLM's {len(theirs)}"] if len(ours) != len(theirs) else []
    for i, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        if list(a["prompt_token_ids"]) != list(b["prompt_token_ids"]):
            found.append(f"step {i}: prompt tokens differ")
        fa, fb = a["multi_modal_data"]["audio"][0], b["multi_modal_data"]["audio"][0]
        if fa.shape != fb.shape or not np.array_equal(fa, fb):
            found.append(f"step {i}: audio frame differs")
    return found


async def differences(model_cls: Any, model_config: Any, seconds: float = 2.0) -> list[str]:
    chunks = sample_audio(seconds)
    return compare(our_prompts(model_cls, model_config, chunks), await vllm_prompts(model_cls, model_config, chunks))
