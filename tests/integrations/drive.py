"""Driving the two frameworks the way they drive an STT, and the audio the tests play.

LiveKit Agents: `STT.stream()`, `push_frame(rtc.AudioFrame)` at the pace a room delivers frames,
`flush()`, `end_input()`, iterating the stream's SpeechEvents; `STT.recognize(frames)`.
Pipecat: a real pipeline in the Pipecat venv (tests/integrations/pipecat_driver.py), read line by
line while it runs so that a test can act mid-stream (cut a connection, drain a server).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tests.helpers import read_wav_pcm, silence
from voxgate_client import AsyncSpeechClient, StreamConfig, chunks

HERE = Path(__file__).resolve().parent
RATE = 16000
TRUTH = {"go_forward.wav": "go forward ten meters", "flite_rms_turn_left.wav": "turn left at the next intersection"}


def two_utterances(gap_s: float = 1.5) -> bytes:
    """go_forward.wav, `gap_s` of silence, flite_rms_turn_left.wav, 1.5 s of silence (8.4 s by
    default): two utterances with an endpoint between them."""
    return (
        read_wav_pcm("go_forward.wav")[0] + silence(gap_s) + read_wav_pcm("flite_rms_turn_left.wav")[0] + silence(1.5)
    )


def one_utterance() -> bytes:
    return read_wav_pcm("go_forward.wav")[0] + silence(1.2)


def seconds_of(pcm: bytes, rate: int = RATE) -> float:
    return len(pcm) / (2 * rate)


def resample(pcm: bytes, rate: int) -> bytes:
    """16 kHz PCM at `rate` (a LiveKit room delivers 48 kHz)."""
    import soxr

    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32)
    return np.clip(soxr.resample(samples, RATE, rate), -32768, 32767).astype("<i2").tobytes()


async def reference_finals(target: str, pcm: bytes, **config: Any) -> list[str]:
    """The final texts voxgate gives for `pcm` through its own Python client, unpaced."""
    cfg = StreamConfig(encoding="linear16", sample_rate_hz=RATE, **config)
    async with AsyncSpeechClient(target) as client:
        transcript = await client.transcribe(cfg, list(chunks(pcm, 3200)))
    return [f.text for f in transcript.finals if f.text.strip()]


# -- LiveKit -------------------------------------------------------------------------------------


@dataclass
class Timed:
    at: float  # time.monotonic() when the event came out of the stream
    event: Any  # livekit.agents.stt.SpeechEvent


@dataclass
class LiveKitRun:
    events: list[Timed] = field(default_factory=list)
    input_ended_at: float = 0.0
    started_at: float = 0.0
    started_wall: float = 0.0  # time.time() of the first frame pushed

    def of(self, kind: str) -> list[Any]:
        return [t.event for t in self.events if t.event.type.value == kind]

    def describe(self) -> str:
        """The events, one a line, for assertion messages."""
        lines = []
        for t in self.events:
            e = t.event
            text = e.alternatives[0].text if e.alternatives else ""
            wall = e.speech_start_time or e.speech_end_time
            lines.append(
                f"{t.at - self.started_at:7.3f} {e.type.value} {text!r}"
                + (f" wall+{wall - self.started_wall:.3f}" if wall else "")
            )
        return "\n".join(lines)

    @property
    def sequence(self) -> list[str]:
        """Event types in order, without usage events and with runs of interims as one."""
        seq: list[str] = []
        for t in self.events:
            kind = t.event.type.value
            if kind == "recognition_usage" or (kind == "interim_transcript" and seq and seq[-1] == kind):
                continue
            seq.append(kind)
        return seq


def frames(pcm: bytes, rate: int, frame_ms: int) -> list[Any]:
    from livekit import rtc

    step = rate * 2 * frame_ms // 1000
    return [
        rtc.AudioFrame(
            data=pcm[i : i + step], sample_rate=rate, num_channels=1, samples_per_channel=len(pcm[i : i + step]) // 2
        )
        for i in range(0, len(pcm), step)
    ]


async def livekit_stream(
    stt: Any,
    pcm: bytes,
    *,
    rate: int = RATE,
    frame_ms: int = 10,
    pace: float = 1.0,
    flush_at_s: float | None = None,
    on_event: Callable[[Any], Awaitable[None] | None] | None = None,
    actions: Sequence[tuple[float, Callable[[Any], None]]] = (),
    **stream_kwargs: Any,
) -> LiveKitRun:
    """Play `pcm` (at `rate`) into `stt.stream()` as a room's audio track would: `frame_ms` frames
    at `pace` times real time (0: all at once), `flush()` at `flush_at_s`, each action (called
    with the stream) at its second of audio, then `end_input()`; collect every SpeechEvent until
    the stream ends."""
    stream = stt.stream(**stream_kwargs)
    run = LiveKitRun(started_at=time.monotonic())

    async def feed() -> None:
        start = time.monotonic()
        run.started_wall = time.time()
        flushed = flush_at_s is None
        due = sorted(actions, key=lambda a: a[0])
        for i, frame in enumerate(frames(pcm, rate, frame_ms)):
            while due and i * frame_ms / 1000 >= due[0][0]:
                due.pop(0)[1](stream)
            if not flushed and i * frame_ms / 1000 >= flush_at_s:  # type: ignore[operator]
                stream.flush()
                flushed = True
            stream.push_frame(frame)
            if pace:
                delay = start + (i + 1) * frame_ms / 1000 / pace - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
        run.input_ended_at = time.monotonic()
        stream.end_input()

    feeder = asyncio.create_task(feed())
    try:
        async for event in stream:
            run.events.append(Timed(time.monotonic(), event))
            if on_event is not None:
                maybe = on_event(event)
                if maybe is not None:
                    await maybe
        await feeder
    finally:
        feeder.cancel()
        await stream.aclose()
    return run


# -- Pipecat -------------------------------------------------------------------------------------


@dataclass
class PipecatRun:
    lines: list[dict[str, Any]]
    stderr: str

    def frames(self, type_name: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line["kind"] == "frame" and line["type"] == type_name]

    def events(self, name: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line["kind"] == "event" and line["name"] == name]

    def first(self, kind: str) -> dict[str, Any]:
        return next(line for line in self.lines if line["kind"] == kind)

    @property
    def sequence(self) -> list[str]:
        """The frame types the service pushed downstream, in its order, runs of interims as one."""
        return self._sequence("pushed")

    @property
    def received(self) -> list[str]:
        """The same, in the order the collector received them (system frames may overtake)."""
        return self._sequence("frame")

    def all_received(self) -> bool:
        """Whether the collector received every frame the service pushed."""
        pushed = sorted(line["type"] for line in self.lines if line["kind"] == "pushed")
        return pushed == sorted(line["type"] for line in self.lines if line["kind"] == "frame")

    def _sequence(self, kind: str) -> list[str]:
        seq: list[str] = []
        for line in self.lines:
            if line["kind"] != kind:
                continue
            if not (line["type"] == "InterimTranscriptionFrame" and seq and seq[-1] == line["type"]):
                seq.append(line["type"])
        return seq


def run_pipecat(
    python: Path,
    tmp: Path,
    pcm: bytes,
    *,
    on_line: Callable[[dict[str, Any]], None] | None = None,
    timeout_s: float = 120,
    **plan: Any,
) -> PipecatRun:
    """Run the pipeline of pipecat_driver.py on `pcm` with `plan`; `on_line` sees each line as it comes."""
    audio = tmp / f"audio-{time.monotonic_ns()}.raw"
    audio.write_bytes(pcm)
    plan = {"audio": str(audio), **plan}
    proc = subprocess.Popen(
        [str(python), str(HERE / "pipecat_driver.py"), json.dumps(plan)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stderr: list[str] = []
    reader = threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True)  # type: ignore[arg-type]
    reader.start()
    timer = threading.Timer(timeout_s, proc.kill)
    timer.start()
    lines: list[dict[str, Any]] = []
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = json.loads(raw)
            lines.append(line)
            if on_line is not None:
                on_line(line)
        proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(5)
    run = PipecatRun(lines, "".join(stderr))
    assert proc.returncode == 0, f"the pipeline failed (exit {proc.returncode}):\n{run.stderr[-4000:]}"
    assert lines and lines[-1]["kind"] == "done", f"the pipeline did not finish:\n{run.stderr[-4000:]}"
    return run
