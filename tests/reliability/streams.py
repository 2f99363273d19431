"""Helpers for reliability tests: streams run on threads with every response time-stamped."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from tests.helpers import ServerProcess, silence, voiced
from voxgate_client.v1 import speech_pb2 as pb

CHUNK = 3200  # 100 ms at 16 kHz LINEAR16


@dataclass
class Recorded:
    """One stream: (monotonic time, response) pairs and how it ended."""

    started_at: float = 0.0
    responses: list[tuple[float, pb.StreamingRecognizeResponse]] = field(default_factory=list)
    error: grpc.RpcError | None = None
    ended_at: float = 0.0

    def __post_init__(self) -> None:
        self.got_final = threading.Event()

    @property
    def items(self) -> list[pb.StreamingRecognizeResponse]:
        return [r for _, r in self.responses]

    def finals(self) -> list[tuple[float, pb.RecognitionResult]]:
        return [(t, r.result) for t, r in self.responses if r.HasField("result") and r.result.is_final]

    def warnings(self) -> list[tuple[float, pb.Warning]]:
        return [(t, r.warning) for t, r in self.responses if r.HasField("warning")]

    def wait_for(self, predicate: Callable[[pb.StreamingRecognizeResponse], bool], timeout: float) -> bool:
        """Poll until a response matching `predicate` has arrived."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(predicate(r) for _, r in list(self.responses)):
                return True
            time.sleep(0.01)
        return False

    def ended(self) -> pb.SessionEnded | None:
        last = self.responses[-1][1] if self.responses else None
        return last.ended if last is not None and last.HasField("ended") else None


def record(
    server: ServerProcess, requests: Iterable[pb.StreamingRecognizeRequest], rec: Recorded, timeout: float = 60
) -> None:
    """Run one stream to its end, filling `rec` (call on a thread)."""
    rec.started_at = time.monotonic()
    try:
        for response in server.stub().StreamingRecognize(iter(requests), timeout=timeout):
            rec.responses.append((time.monotonic(), response))
            if response.HasField("result") and response.result.is_final:
                rec.got_final.set()
    except grpc.RpcError as exc:
        rec.error = exc
    finally:
        rec.ended_at = time.monotonic()


def run_threads(
    server: ServerProcess, streams: list[Iterable[pb.StreamingRecognizeRequest]], timeout: float = 60
) -> tuple[list[Recorded], list[threading.Thread]]:
    recs = [Recorded() for _ in streams]
    threads = [
        threading.Thread(target=record, args=(server, reqs, rec, timeout), daemon=True)
        for reqs, rec in zip(streams, recs, strict=True)
    ]
    for t in threads:
        t.start()
    return recs, threads


def live(
    audio: bytes, stop: threading.Event | None = None, chunk: int = CHUNK, speed: float = 1.0
) -> Iterator[pb.StreamingRecognizeRequest]:
    """Audio requests paced like a live source (100 ms chunks at `speed` x real time)."""
    start = time.monotonic()
    for n, i in enumerate(range(0, len(audio), chunk)):
        delay = start + n * chunk / 32000 / speed - time.monotonic()
        if stop is not None:
            if stop.wait(max(delay, 0)):
                return
        elif delay > 0:
            time.sleep(delay)
        yield pb.StreamingRecognizeRequest(audio=audio[i : i + chunk])


def speech_pattern(segments: int, voiced_s: float = 1.0, silence_s: float = 0.6) -> tuple[bytes, list[tuple[int, int]]]:
    """Alternating voiced / silent audio, and the voiced spans in ms."""
    one = voiced(voiced_s) + silence(silence_s)
    step = round((voiced_s + silence_s) * 1000)
    return one * segments, [(k * step, k * step + round(voiced_s * 1000)) for k in range(segments)]


def uncovered(spans: list[tuple[int, int]], results: list[pb.RecognitionResult]) -> list[tuple[int, int]]:
    """Voiced spans no final result overlaps (each one is speech whose words were lost)."""
    ranges = [(r.start_offset.ToMilliseconds(), r.end_offset.ToMilliseconds()) for r in results if r.text.strip()]
    return [(s, e) for s, e in spans if not any(a < e and b > s for a, b in ranges)]


def write_measurement(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True))
    print(f"\nmeasurements written to {path}")
