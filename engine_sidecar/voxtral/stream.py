"""One vLLM streaming request: a stretch of a session's audio, from left padding to right padding.

Driven exactly as vLLM's own realtime server drives it: the model class's
`buffer_realtime_audio` builds every step's prompt (padding, delay, look-back
and look-ahead are Mistral's logic, not ours), each step's prompt token is the
token the model just produced (lock-step feedback), and ending the audio makes
the buffer append the right padding so the last words come out.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import numpy as np

from engine_api.audio import BYTES_PER_SAMPLE, SAMPLE_RATE_HZ

from ..reanchor.settings import REQUEST_TAG
from .chunk_render import Render, vllm_render

TokenSink = Callable[["RequestStream", int, int, str], Awaitable[None]]

_ids = itertools.count()


class RequestStream:
    """Audio in through feed()/end(); tokens out through the sink, in order, with their index k."""

    def __init__(self, llm: Any, model_cls: Any, session_id: str, offset_ms: int,
                 predecessor: RequestStream | None, logit_bias: dict[int, float] | None = None,
                 reanchor: bool = False, prefix: str = "voxgate", render: Render | None = None) -> None:
        self._llm = llm
        self._render = render
        self._reanchor = reanchor
        self._logit_bias = logit_bias
        self._model_cls = model_cls
        # prefix: one per front end of a shared engine core (its re-anchor news is routed by it)
        self.request_id = f"{prefix}-{session_id}-{next(_ids)}"
        self.offset_ms = offset_ms  # session time at which this request's audio starts
        self.samples = 0  # real audio fed so far
        self.tokens = 0  # outputs received so far
        self.shifted = 0  # positions removed by re-anchoring so far
        self.ended = False  # we ended its audio (end()); a request that finishes without it was cut short
        self.done = asyncio.Event()
        self._predecessor = predecessor
        self._audio: asyncio.Queue[np.ndarray | None] = asyncio.Queue()

    @property
    def audio_ms(self) -> int:
        return self.samples * 1000 // SAMPLE_RATE_HZ

    def feed(self, pcm16: bytes) -> None:
        """Queue audio. Bounded by the session's backlog accounting, not here: the model's buffer
        drains this queue into its own unbounded one immediately anyway."""
        if self.ended or self.done.is_set() or not pcm16:
            return
        self._audio.put_nowait(np.frombuffer(pcm16, dtype=np.int16).astype(np.float32) / 32768.0)
        self.samples += len(pcm16) // BYTES_PER_SAMPLE

    def end(self) -> None:
        """No more audio: the buffer adds the right padding and the request finishes."""
        if not self.ended:
            self.ended = True
            self._audio.put_nowait(None)

    async def _audio_stream(self) -> AsyncGenerator[np.ndarray, None]:
        while (chunk := await self._audio.get()) is not None:
            yield chunk

    async def _inputs(self, feedback: asyncio.Queue[list[int]]) -> AsyncGenerator[Any, None]:
        from vllm.engine.protocol import StreamingInput

        render = self._render or vllm_render(self._llm)
        prompts = self._model_cls.buffer_realtime_audio(self._audio_stream(), feedback, self._llm.model_config)
        steps = itertools.count()
        async for prompt in prompts:  # the step's tag keys the engine core's encoder cache: unique per step
            yield StreamingInput(prompt=await render(prompt, f"{self.request_id}-{next(steps)}"))

    async def run(self, sink: TokenSink, on_start: Callable[[], Awaitable[None]] | None = None) -> None:
        """Wait for the previous request of the session to finish (outputs stay in order), then stream.
        Cancelling this aborts the engine request (vLLM's generate() does it on CancelledError)."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        try:
            if self._predecessor is not None:
                await self._predecessor.done.wait()
                self._predecessor = None
            if on_start is not None:
                await on_start()
            params = SamplingParams(temperature=0.0, max_tokens=self._model_cls.realtime_max_tokens,
                                    output_kind=RequestOutputKind.DELTA, logit_bias=self._logit_bias,
                                    extra_args={REQUEST_TAG: self.request_id} if self._reanchor else None)
            feedback: asyncio.Queue[list[int]] = asyncio.Queue()
            async for out in self._llm.generate(prompt=self._inputs(feedback), sampling_params=params,
                                                request_id=self.request_id):
                completion = out.outputs[0] if out.outputs else None
                if completion is None or not completion.token_ids:
                    continue
                ids = list(completion.token_ids)
                feedback.put_nowait(ids)  # lock-step: the next step's prompt token is this output
                for i, token_id in enumerate(ids):
                    await sink(self, self.tokens, token_id, completion.text if i == len(ids) - 1 else "")
                    self.tokens += 1
        finally:
            self.done.set()
