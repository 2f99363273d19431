"""Runs a real Pipecat pipeline -- an audio file source, VoxgateSTTService, a collector -- against a
voxgate server, and reports what the pipeline saw as JSON lines on stdout, as it happens.

Runs in the Pipecat venv (tests/integrations/venvs.py), not the project's: it imports nothing of
the tests package. Usage: python pipecat_driver.py PLAN_JSON, where the plan has
  target, audio (a raw 16-bit mono PCM file), sample_rate, frame_ms, pace (1.0: real time;
  0: as fast as the pipeline takes it), language, vad_events, endpointing_silence_ms,
  resume ({backoff_s, ...} or false), retry_delay_s, wait_for_session (play once the first
  session has started), finalize_at_s (times in the audio to push a VADUserStoppedSpeakingFrame
  at), language_at_s ([[seconds, code], ...]: STTUpdateSettingsFrame), keyterms (the service's),
  keyterms_at_s ([[seconds, [term, ...]], ...]: STTUpdateSettingsFrame with VoxgateSTTSettings).
Lines: {"t": seconds since start, "kind": "frame" | "pushed" | "event" | "upstream" | "audio_done" | "done", ...}
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from loguru import logger
from pipecat.frames.frames import (
    EndFrame,
    ErrorFrame,
    Frame,
    InputAudioRawFrame,
    InterimTranscriptionFrame,
    ProposedUserStartedSpeakingFrame,
    ProposedUserStoppedSpeakingFrame,
    StartFrame,
    STTUpdateSettingsFrame,
    TranscriptionFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.settings import STTSettings
from pipecat.workers.runner import WorkerRunner
from pipecat_voxgate import VoxgateSTTService, VoxgateSTTSettings

from voxgate_client import ResumePolicy

T0 = time.monotonic()
REPORTED = (
    TranscriptionFrame,
    InterimTranscriptionFrame,
    ProposedUserStartedSpeakingFrame,
    ProposedUserStoppedSpeakingFrame,
)


def emit(kind: str, **fields: Any) -> None:
    print(json.dumps({"t": round(time.monotonic() - T0, 3), "kind": kind, **fields}), flush=True)


def frame_fields(frame: Frame) -> dict[str, Any]:
    fields: dict[str, Any] = {"type": type(frame).__name__}
    if isinstance(frame, (TranscriptionFrame, InterimTranscriptionFrame)):
        fields.update(
            text=frame.text,
            language=str(frame.language) if frame.language else None,
            user_id=frame.user_id,
            result=dataclasses.asdict(frame.result),
        )
        if isinstance(frame, TranscriptionFrame):
            fields["finalized"] = frame.finalized
    return fields


class AudioFileSource(FrameProcessor):
    """Plays a PCM file into the pipeline as InputAudioRawFrames, like a transport's input, at
    `pace` times real time; pushes the plan's finalize and settings frames at their audio times."""

    def __init__(self, plan: dict[str, Any], done: asyncio.Event) -> None:
        super().__init__()
        self._plan = plan
        self._pcm = Path(plan["audio"]).read_bytes()
        self._done = done
        self._task: asyncio.Task[None] | None = None
        self.session_started = asyncio.Event()

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if direction == FrameDirection.UPSTREAM:
            if isinstance(frame, ErrorFrame):
                emit("upstream", type="ErrorFrame", error=frame.error)
            elif isinstance(frame, REPORTED):
                emit("upstream", **frame_fields(frame))
        await self.push_frame(frame, direction)
        if isinstance(frame, StartFrame):
            self._task = self.create_task(self._play())

    async def _play(self) -> None:
        plan, pcm = self._plan, self._pcm
        if plan.get("wait_for_session"):  # no backlog of audio behind a slow session start
            await self.session_started.wait()
        rate = plan.get("sample_rate", 16000)
        step = rate * 2 * plan.get("frame_ms", 20) // 1000
        pace = plan.get("pace", 1.0)
        finalize_at = sorted(plan.get("finalize_at_s", []))
        language_at = sorted(plan.get("language_at_s", []))
        keyterms_at = sorted(plan.get("keyterms_at_s", []))
        start = time.monotonic()
        for i in range(0, len(pcm), step):
            at_s = i / (2 * rate)
            while finalize_at and finalize_at[0] <= at_s:
                finalize_at.pop(0)
                await self.push_frame(VADUserStoppedSpeakingFrame(stop_secs=0.0))
            while language_at and language_at[0][0] <= at_s:
                _, code = language_at.pop(0)
                await self.push_frame(STTUpdateSettingsFrame(delta=STTSettings(language=code)))
            while keyterms_at and keyterms_at[0][0] <= at_s:
                _, terms = keyterms_at.pop(0)
                await self.push_frame(STTUpdateSettingsFrame(delta=VoxgateSTTSettings(keyterms=terms)))
            await self.push_frame(InputAudioRawFrame(audio=pcm[i : i + step], sample_rate=rate, num_channels=1))
            if pace:
                delay = start + (i + step) / (2 * rate) / pace - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
        emit("audio_done", audio_s=len(pcm) / (2 * rate))
        self._done.set()


class PushOrder(BaseObserver):
    """What the STT service pushes downstream, in the order it pushes it ("pushed" lines): the
    collector's "frame" lines are the order frames arrive in, where a system frame (the Proposed*
    ones) can overtake data and control frames still queued."""

    def __init__(self, service: FrameProcessor) -> None:
        super().__init__()
        self._service = service

    async def on_push_frame(self, data: FramePushed) -> None:
        if (
            data.source is self._service
            and data.direction == FrameDirection.DOWNSTREAM
            and isinstance(data.frame, REPORTED)
        ):
            emit("pushed", type=type(data.frame).__name__)


class Collector(FrameProcessor):
    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if direction == FrameDirection.DOWNSTREAM and isinstance(frame, REPORTED):
            emit("frame", **frame_fields(frame))
        await self.push_frame(frame, direction)


async def main(plan: dict[str, Any]) -> None:
    resume: bool | ResumePolicy = (
        ResumePolicy(**plan["resume"]) if isinstance(plan.get("resume"), dict) else bool(plan.get("resume", True))
    )
    stt = VoxgateSTTService(
        address=plan["target"],
        language=plan.get("language"),
        resume=resume,
        vad_events=plan.get("vad_events", False),
        endpointing_silence_ms=plan.get("endpointing_silence_ms", 0),
        retry_delay_s=plan.get("retry_delay_s", 1.0),
        keyterms=plan.get("keyterms", ()),
    )
    for name in (
        "on_speech_started",
        "on_speech_stopped",
        "on_session_started",
        "on_connected",
        "on_disconnected",
        "on_connection_error",
    ):

        def handler(_service: Any, *args: Any, _name: str = name) -> None:
            emit("event", name=_name, args=list(args))

        stt.add_event_handler(name, handler)

    done = asyncio.Event()
    source = AudioFileSource(plan, done)
    stt.add_event_handler("on_session_started", lambda _service, _session: source.session_started.set())
    pipeline = Pipeline([source, stt, Collector()])
    worker = PipelineWorker(
        pipeline,
        cancel_on_idle_timeout=False,
        observers=[PushOrder(stt)],
        params=PipelineParams(audio_in_sample_rate=plan.get("sample_rate", 16000)),
    )

    async def end_when_played() -> None:
        await done.wait()
        await worker.queue_frame(EndFrame())

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await asyncio.gather(runner.run(), end_when_played())
    emit("done")


if __name__ == "__main__":
    logger.remove()
    logger.add(sys.stderr, level="INFO")
    asyncio.run(main(json.loads(sys.argv[1])))
