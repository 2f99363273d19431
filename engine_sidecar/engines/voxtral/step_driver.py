"""One realtime request driven step by step on AsyncLLM's own request path, without `generate()`'s
streaming-input machinery.

`AsyncLLM.generate(prompt=<async generator>)` runs every 80 ms step through a task of its own
(`handle_inputs`) and re-validates it from scratch: `InputProcessor.process_inputs` clones the sampling
parameters, re-applies the generation config and tokenizer, re-checks the prompt, and builds a new
`EngineCoreRequest`. For a realtime stream only three fields of that request change from step to step
(the prompt token, the audio frame's feature, the arrival time). `DirectRequest` validates the first step
with `process_inputs` exactly as vLLM does, then builds each later one from it with those three fields
replaced, and hands it to the same two calls vLLM's own path ends in (`OutputProcessor.add_request`
through `AsyncLLM._add_request`, then the engine core's `add_request_async`): same request id, same
outputs, same abort. At start-up `differences()` builds one step both ways and compares what would go to
the engine core byte for byte, and driver_check.py streams the same audio through both paths, compares
what comes back, and chooses: a vLLM where either differs gets its own path back (`step_driver_fallback`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import structlog

from engine_sidecar.engines.voxtral.chunk_render import DirectRender, Render

log = structlog.get_logger("voxtral")

MODES = ("direct", "vllm")


def collector(output_kind: Any, request_id: str, wake: asyncio.Event) -> Any:
    """vLLM's per-request output collector, also waking the request's one task on every output."""
    from vllm.v1.engine.output_processor import RequestOutputCollector

    class WakingCollector(RequestOutputCollector):
        def put(self, output: Any) -> None:
            super().put(output)
            wake.set()

    return WakingCollector(output_kind, request_id)


class DirectRequest:
    """One streaming request: open with the request's params, send() each step's engine input, finish()."""

    def __init__(
        self, llm: Any, supported_tasks: Any, request_id: str, params: Any, wake: asyncio.Event, render: Render
    ) -> None:
        from vllm.inputs import TokensPrompt
        from vllm.v1.engine.exceptions import EngineDeadError

        if llm.errored:  # as AsyncLLM.add_request
            raise EngineDeadError()
        self._llm = llm
        self._tasks = supported_tasks
        self._render = render
        # the direct renderer's frame parts: a later step then needs no engine input (None: vLLM's renderer)
        self._frame = render.frame if isinstance(render, DirectRender) else None
        self.frames = self._frame is not None
        self._params = params = self._checked(params)
        # vLLM's own end-of-input marker for a streaming request: an empty, non-resumable request.
        self._final = llm.input_processor.process_inputs(
            request_id=request_id,
            prompt=TokensPrompt(prompt_token_ids=[0]),
            params=params,
            supported_tasks=supported_tasks,
        )
        llm.input_processor.assign_request_id(self._final)
        self.internal_id: str = self._final.request_id
        self.external_id = request_id
        self.queue = collector(params.output_kind, self.internal_id, wake)
        self._template: Any = None
        self.sent = 0
        llm._run_output_handler()

    def _checked(self, params: Any) -> Any:
        if not params.skip_clone:  # as AsyncLLM: one clone for the request, shared by its steps
            params = params.clone()
            params.skip_clone = True
        self._llm._validate_streaming_input_sampling_params(params)
        return params

    def use_params(self, params: Any) -> None:
        """Later steps take these params (a session's phrase hints changed): the next step is made by vLLM's
        process_inputs again, and derived from that one."""
        self._params = self._checked(params)
        self._template = None

    async def request(self, prompt: dict[str, Any], tag: str) -> Any:
        """The EngineCoreRequest for this step (`tag` names its audio item): the first rendered and validated
        by vLLM, each later one derived from it (from the prompt alone with the direct renderer)."""
        if self._template is not None and self._frame is not None:
            return self.from_frame(prompt, tag)
        return self.from_input(await self._render(prompt, tag))

    def from_frame(self, prompt: dict[str, Any], tag: str) -> Any:
        """A later step's request from its prompt and the direct renderer's frame parts."""
        assert self._frame is not None and self._template is not None
        item, placeholder = self._frame(prompt)
        return derive(self._llm, self._template, prompt["prompt_token_ids"], item, placeholder, tag, time.time())

    def from_input(self, engine_input: dict[str, Any]) -> Any:
        """A step's request from its rendered engine input: vLLM's process_inputs for the first."""
        if self._template is not None:
            (item,), (placeholder,) = engine_input["mm_kwargs"]["audio"], engine_input["mm_placeholders"]["audio"]
            (tag,) = engine_input["mm_hashes"]["audio"]
            return derive(
                self._llm,
                self._template,
                engine_input["prompt_token_ids"],
                item,
                placeholder,
                tag,
                engine_input["arrival_time"],
            )
        req = self._llm.input_processor.process_inputs(
            request_id=self.internal_id,
            prompt=engine_input,
            params=self._params,
            supported_tasks=self._tasks,
            resumable=True,
        )
        req.external_req_id = self.external_id
        self._template = req
        return req

    async def send(self, prompt: dict[str, Any], tag: str) -> None:
        await self._llm._add_request(await self.request(prompt, tag), None, None, 0, self.queue)
        self.sent += 1

    async def finish(self) -> None:
        """No more steps: vLLM's marker if any step went, else the collector is told directly (as vLLM does)."""
        if self.sent:
            await self._llm._add_request(self._final, None, None, 0, self.queue)
        else:
            from vllm.outputs import STREAM_FINISHED

            self.queue.put(STREAM_FINISHED)

    async def abort(self) -> None:
        await self._llm.abort(self.internal_id, internal=True)


def derive(llm: Any, template: Any, token_ids: Any, item: Any, placeholder: Any, tag: str, arrival_time: float) -> Any:
    """A later step's request: the first step's, with this step's prompt tokens, audio item, placeholder,
    item tag and time."""
    import msgspec  # vLLM's, imported with it: the module loads without vLLM (core_host's supervision tests)
    from vllm.multimodal.inputs import MultiModalFeatureSpec

    feature = MultiModalFeatureSpec(
        data=item,
        modality="audio",
        mm_position=placeholder,
        mm_hash=tag,
        identifier=llm.input_processor._get_mm_identifier(tag, None),
    )
    return msgspec.structs.replace(
        template, prompt_token_ids=list(token_ids), mm_features=[feature], arrival_time=arrival_time
    )


def wire(request: Any) -> list[bytes]:
    """What goes to the engine core for this request (vLLM's own encoder), to compare two requests."""
    from vllm.v1.serial_utils import MsgpackEncoder

    buffers: list[Any] = list(MsgpackEncoder().encode(request))  # bytes, or tensors' backing buffers
    return [bytes(b) for b in buffers]


async def differences(llm: Any, render: Any, params: Any) -> list[str]:
    """Where a derived step request differs from the one vLLM's process_inputs makes (empty: identical)."""
    from engine_sidecar.engines.voxtral.chunk_render import sample_prompts

    first, later = sample_prompts(llm)
    wake = asyncio.Event()
    req = DirectRequest(llm, await llm.get_supported_tasks(), "voxgate-step-check", params, wake, render)
    await req.request(first, "voxgate-step-check-0")
    engine_input = await render(later, "voxgate-step-check-1")  # the renderer is checked against vLLM's apart
    ours = req.from_frame(later, "voxgate-step-check-1") if req.frames else req.from_input(engine_input)
    theirs = llm.input_processor.process_inputs(
        request_id=req.internal_id,
        prompt=engine_input,
        params=req._params,
        supported_tasks=await llm.get_supported_tasks(),
        resumable=True,
    )
    theirs.external_req_id = req.external_id
    ours.arrival_time = theirs.arrival_time
    if wire(ours) != wire(theirs):
        return ["a derived step request differs from vLLM's"]
    return []
