"""Which step driver runs: the direct one only where it behaves as vLLM's own path. One short stream
through each, compared.

step_driver.differences() compares what the two paths send to the engine core, byte for byte. That misses
drift in what comes back: how the front end's output collector merges outputs, what it sends after the
end of input, whether the request finishes at all (vLLM 0.33 changed all three). So at start-up the same
audio is streamed once through each driver, one after the other, and the token ids, the number of outputs
and the finish are compared. The stream is short (about 20 steps) and greedy, so it is deterministic.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
import structlog

from engine_api.audio import SAMPLE_RATE_HZ
from engine_sidecar.engines.voxtral import step_driver, steps
from engine_sidecar.engines.voxtral.chunk_render import Render
from engine_sidecar.engines.voxtral.stream import RequestStream, request_params
from engine_sidecar.engines.voxtral.token_text import TokenPieces
from engine_sidecar.engines.voxtral.vllm_window.versions import Release

log = structlog.get_logger("voxtral")

CHECK_AUDIO_S = 0.8
CHECK_TIMEOUT_S = 60.0  # a request that has not finished by then never will: a dead engine or a lost end


@dataclass(frozen=True)
class Run:
    """What one driver made of the check audio."""

    token_ids: tuple[int, ...]
    texts: tuple[str, ...]
    finished: bool  # it ended by itself after the end of its audio


def check_audio(seconds: float = CHECK_AUDIO_S) -> bytes:
    """Seeded broadband audio: random weights and real weights alike produce tokens for it."""
    rng = np.random.default_rng(11)
    return (rng.standard_normal(int(SAMPLE_RATE_HZ * seconds)) * 3000).astype("<i2").tobytes()


async def run_once(
    llm: Any,
    model_cls: Any,
    render: Render,
    pieces: TokenPieces | None,
    direct_tasks: Any,
    pcm: bytes,
    timeout_s: float,
) -> Run:
    """Stream `pcm` through one driver (direct where `direct_tasks` is given, else vLLM's generate())."""
    ids: list[int] = []
    texts: list[str] = []

    async def sink(_stream: RequestStream, _k: int, token_id: int, text: str) -> None:
        ids.append(token_id)
        texts.append(text)

    stream = RequestStream(
        llm, model_cls, f"driver-check-{uuid.uuid4().hex[:8]}", 0, None, prefix="voxgate-check", render=render,
        direct_tasks=direct_tasks, pieces=pieces,
    )  # fmt: skip  # a unique id: front ends sharing an engine core run this check at the same time
    stream.feed(pcm)
    stream.end()
    try:
        await asyncio.wait_for(stream.run(sink), timeout_s)  # cancelled at the timeout: the request aborted
        finished = True
    except TimeoutError:
        finished = False
    return Run(tuple(ids), tuple(texts), finished)


async def output_differences(
    llm: Any,
    model_cls: Any,
    render: Render,
    pieces: TokenPieces | None,
    direct_tasks: Any,
    pcm: bytes | None = None,
    timeout_s: float | None = None,
) -> list[str]:
    """Where the direct driver's outputs differ from vLLM's path for the same audio (empty: the same)."""
    timeout_s = CHECK_TIMEOUT_S if timeout_s is None else timeout_s
    pcm = check_audio() if pcm is None else pcm
    ours = await run_once(llm, model_cls, render, pieces, direct_tasks, pcm, timeout_s)
    theirs = await run_once(llm, model_cls, render, pieces, None, pcm, timeout_s)
    return compare(ours, theirs, timeout_s)


def compare(ours: Run, theirs: Run, timeout_s: float) -> list[str]:
    found: list[str] = []
    for name, run in (("the direct driver", ours), ("vLLM's path", theirs)):
        if not run.finished:
            found.append(f"{name} did not finish within {timeout_s:g} s of the end of its audio")
    if len(ours.token_ids) != len(theirs.token_ids):
        found.append(f"{len(ours.token_ids)} tokens by the direct driver, {len(theirs.token_ids)} by vLLM's path")
    first = next((i for i, (a, b) in enumerate(zip(ours.token_ids, theirs.token_ids, strict=False)) if a != b), None)
    if first is not None:
        found.append(
            f"token {first} differs: {ours.token_ids[first]} by the direct driver, {theirs.token_ids[first]} by vLLM's"
        )
    if "".join(ours.texts) != "".join(theirs.texts):
        found.append("the text differs")
    return found


async def choose(llm: Any, model_cls: Any, render: Any, pieces: Any, mode: str, release: Release | None) -> str:
    """The step driver in effect: "direct" only on a release whose request path it copies (versions.py),
    where its steps and requests are vLLM's byte for byte, and where a short stream through each path gives
    the same outputs and finish (output_differences)."""
    if mode == "vllm":
        return "vllm"
    if release is None or not release.direct_steps:
        name = release.name if release else "an unlisted release"
        log.info("step_driver_fallback", wanted=mode, used="vllm", problems=[f"vLLM {name}: its own path"])
        return "vllm"
    try:
        params = request_params(model_cls, None, None, pieces)
        problems = await steps.differences(model_cls, llm.model_config) + await step_driver.differences(
            llm, render, params
        )
        if not problems:
            tasks = await llm.get_supported_tasks()
            problems = await output_differences(llm, model_cls, render, pieces, tasks)
    except Exception as exc:  # a vLLM whose internals moved: its own path still works
        problems = [f"{type(exc).__name__}: {exc}"]
    if problems:
        log.warning("step_driver_fallback", wanted=mode, used="vllm", problems=problems[:4])
        return "vllm"
    return "direct"
