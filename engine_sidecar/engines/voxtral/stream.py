"""One vLLM streaming request: a stretch of a session's audio, from left padding to right padding.

Each step's prompt is what the model class's `buffer_realtime_audio` makes
(padding, delay, look-back and look-ahead are Mistral's logic, not ours), each
step's prompt token is the token the model just produced (lock-step feedback),
and ending the audio appends the right padding so the last words come out.
Two drivers: "vllm" feeds vLLM's own buffer to `AsyncLLM.generate` exactly as
vLLM's realtime server does; "direct" (the default where it is checked equal
at start-up) makes the same steps with `RealtimeSteps` and sends them with
`DirectRequest`, in this request's one task (step_driver.py says why).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import numpy as np

from engine_api.audio import BYTES_PER_SAMPLE, SAMPLE_RATE_HZ
from engine_sidecar.engines.voxtral.chunk_render import Render, vllm_render
from engine_sidecar.engines.voxtral.phrase_trie import PHRASES_ARG
from engine_sidecar.engines.voxtral.reanchor.settings import REQUEST_TAG
from engine_sidecar.engines.voxtral.request_memory import TokenListBound
from engine_sidecar.engines.voxtral.session_phrases import SessionPhrases
from engine_sidecar.engines.voxtral.step_driver import DirectRequest
from engine_sidecar.engines.voxtral.steps import RealtimeSteps, make_steps
from engine_sidecar.engines.voxtral.token_text import TokenPieces, TokenText

TokenSink = Callable[["RequestStream", int, int, str], Awaitable[None]]

_ids = itertools.count()


class RequestStream:
    """Audio in through feed()/end(); tokens out through the sink, in order, with their index k."""

    def __init__(
        self,
        llm: Any,
        model_cls: Any,
        session_id: str,
        offset_ms: int,
        predecessor: RequestStream | None,
        logit_bias: dict[int, float] | None = None,
        reanchor: bool = False,
        prefix: str = "voxgate",
        render: Render | None = None,
        direct_tasks: Any = None,
        pieces: TokenPieces | None = None,
        phrases: SessionPhrases | None = None,
    ) -> None:
        self._llm = llm
        self._phrases = phrases  # the session's phrase hints: each step carries the current list
        self._params: Any = None  # this request's params for the phrase list of _params_version
        self._params_version = 0
        self._pieces = pieces
        self._text = TokenText(pieces) if pieces is not None else None  # None: vLLM's detokenized text
        # direct_tasks: the engine's supported tasks where the direct driver is in effect, else None
        self._direct_tasks = direct_tasks
        self._steps: RealtimeSteps | None = make_steps(model_cls, llm.model_config) if direct_tasks else None
        self._wake = asyncio.Event()
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
        samples = np.frombuffer(pcm16, dtype=np.int16).astype(np.float32) / 32768.0
        if self._steps is not None:
            self._steps.add_audio(samples)
            self._wake.set()
        else:
            self._audio.put_nowait(samples)
        self.samples += len(pcm16) // BYTES_PER_SAMPLE

    def end(self) -> None:
        """No more audio: the buffer adds the right padding and the request finishes."""
        if not self.ended:
            self.ended = True
            if self._steps is not None:
                self._steps.end_audio()
                self._wake.set()
            else:
                self._audio.put_nowait(None)

    async def _audio_stream(self) -> AsyncGenerator[np.ndarray, None]:
        while (chunk := await self._audio.get()) is not None:
            yield chunk

    async def _inputs(self, feedback: asyncio.Queue[list[int]]) -> AsyncGenerator[Any, None]:
        from vllm.engine.protocol import StreamingInput

        render = self._render or vllm_render(self._llm)
        prompts = self._model_cls.buffer_realtime_audio(self._audio_stream(), feedback, self._llm.model_config)
        steps = itertools.count()
        first = self._params
        async for prompt in prompts:  # the step's tag keys the engine core's encoder cache: unique per step
            params = self._step_params()
            yield StreamingInput(
                prompt=await render(prompt, f"{self.request_id}-{next(steps)}"),
                sampling_params=None if params is first else params,
            )

    async def run(self, sink: TokenSink, on_start: Callable[[], Awaitable[None]] | None = None) -> None:
        """Wait for the previous request of the session to finish (outputs stay in order), then stream.
        Cancelling this aborts the engine request."""
        try:
            if self._predecessor is not None:
                await self._predecessor.done.wait()
                self._predecessor = None
            if on_start is not None:
                await on_start()
            self._params_version = self._phrases.version if self._phrases is not None else 0
            params = self._params = self._make_params()
            if self._steps is not None:
                await self._run_direct(sink, params, self._steps)
            else:
                await self._run_vllm(sink, params)
        finally:
            self.done.set()

    def _make_params(self) -> Any:
        phrases = self._phrases.arg if self._phrases is not None else None
        return request_params(
            self._model_cls, self._logit_bias, self.request_id if self._reanchor else None, self._pieces, phrases
        )

    def _step_params(self) -> Any:
        """The params of the next step: new ones once the session's phrase hints changed."""
        if self._phrases is not None and self._phrases.version != self._params_version:
            self._params_version = self._phrases.version
            self._params = self._make_params()
        return self._params

    async def _run_vllm(self, sink: TokenSink, params: Any) -> None:
        """vLLM's generate() aborts the engine request when cancelled."""
        feedback: asyncio.Queue[list[int]] = asyncio.Queue()
        bound = TokenListBound(self._llm.output_processor, self.request_id)
        async for out in self._llm.generate(
            prompt=self._inputs(feedback), sampling_params=params, request_id=self.request_id
        ):
            bound.output()  # a session-long request: vLLM's front end would keep every token id of it
            ids = self._token_ids(out)
            if ids:
                feedback.put_nowait(ids)  # lock-step: the next step's prompt token is this output
                await self._emit(sink, out, ids)

    async def _run_direct(self, sink: TokenSink, params: Any, steps: RealtimeSteps) -> None:
        """One task: each output is handed on and fed back, then every step that audio and tokens allow is
        sent; it sleeps until the next output or audio. Ends as generate() does (the finished output)."""
        render = self._render or vllm_render(self._llm)
        req = DirectRequest(self._llm, self._direct_tasks, self.request_id, params, self._wake, render)
        queue, finishing, finished = req.queue, False, False
        bound = TokenListBound(self._llm.output_processor, self.request_id, req.internal_id)
        try:
            while not finished:
                self._wake.clear()
                if (out := queue.get_nowait()) is not None:  # raises what the engine put there (e.g. dead)
                    finished = out.finished
                    bound.output()  # a session-long request: vLLM's front end would keep every token id of it
                    if ids := self._token_ids(out):
                        steps.add_token(ids[-1])  # lock-step, as vLLM's buffer takes it: the last token
                        await self._emit(sink, out, ids)
                    continue
                while not finishing and isinstance(prompt := steps.next_prompt(), dict):
                    if (step_params := self._step_params()) is not params:
                        params = step_params
                        req.use_params(params)
                    await req.send(prompt, f"{self.request_id}-{req.sent}")
                if not finishing and steps.ended:
                    finishing = True
                    await req.finish()
                if queue.output is None:
                    await self._wake.wait()
        except BaseException as exc:
            from vllm.v1.engine.exceptions import EngineDeadError

            if not finished and not isinstance(exc, EngineDeadError):  # as generate(): a dead engine has none
                with contextlib.suppress(Exception):  # the engine dying meanwhile: the first error is the news
                    await req.abort()
            raise

    @staticmethod
    def _token_ids(out: Any) -> list[int]:
        completion = out.outputs[0] if out.outputs else None
        return list(completion.token_ids) if completion is not None and completion.token_ids else []

    async def _emit(self, sink: TokenSink, out: Any, ids: list[int]) -> None:
        text = out.outputs[0].text if self._text is None else "".join(self._text.next(i) for i in ids)
        for i, token_id in enumerate(ids):
            await sink(self, self.tokens, token_id, text if i == len(ids) - 1 else "")
            self.tokens += 1


def request_params(
    model_cls: Any,
    logit_bias: dict[int, float] | None,
    reanchor_tag: str | None,
    pieces: TokenPieces | None = None,
    phrases: dict[str, Any] | None = None,
) -> Any:
    """A realtime request's sampling parameters (greedy, one delta per output; the re-anchor tag routes the
    engine core's re-anchor news back to the request; with our own token pieces vLLM does not detokenize;
    `phrases`: the session's phrase hints for the phrase-bias logits processor)."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(
        temperature=0.0,
        max_tokens=model_cls.realtime_max_tokens,
        output_kind=RequestOutputKind.DELTA,
        logit_bias=logit_bias,
        detokenize=pieces is None,
        extra_args={
            **({REQUEST_TAG: reanchor_tag} if reanchor_tag else {}),
            **({PHRASES_ARG: phrases} if phrases else {}),
        }
        or None,
    )
