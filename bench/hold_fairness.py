"""Does a caller on hold take the engine from the others? Issue 45's fairness run, side by side.

One `voxgate serve --engine whisper --max-sessions 4` (its own, on a free port). Three callers stream
clips of the WER corpus in real time, one session per clip with a 2 s pause between; a fourth is either a
hold-music caller (the music of bench/nonspeech_audio.py in real time, or unpaced with --unpaced) or
absent. Every 5 s a prober opens a session and sends a second of audio. It reports, for each run:

- refusals of the prober while a slot was free: refusals whose message is not "all sessions in use"
  (a lagging decoder is not a full server);
- readiness: the share of 0.5 s health polls that were NOT_SERVING while a slot was free;
- the speech callers' final delay (wall time from the end of an utterance's audio to its final), p50/p95,
  and words heard.

    .venv/bin/python bench/hold_fairness.py [--seconds 120] [--music pad] [--seed 7] [--unpaced]
        [--detector webrtcvad|silero]
        [--out FILE]

Runs in the bench process only; nothing here is loaded by the service.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "clients/python")]

from bench.nonspeech_audio import synthesize, to_pcm16  # noqa: E402
from bench.wer import WER_CORPUS, load_corpus, start_server  # noqa: E402
from voxgate_client import SpeechClient, StreamConfig  # noqa: E402

RATE = 16000
PROBE_EVERY_S = 5.0
FULL = "all"  # the start of the refusal message of a server whose slots are all in use


def pieces(pcm16: bytes, ms: int = 100) -> Iterator[bytes]:
    step = RATE * 2 * ms // 1000
    for i in range(0, len(pcm16), step):
        yield pcm16[i : i + step]


class Run:
    def __init__(self, target: str, seconds: float) -> None:
        self.target = target
        self.until = time.monotonic() + seconds
        self.held = 0  # sessions open now (ours), so a refusal can be judged
        self.lock = threading.Lock()
        self.delays: list[float] = []
        self.words = 0
        self.refused_free: list[str] = []
        self.refused_full = 0
        self.admitted = 0
        self.callers_refused = 0
        self.not_serving_free = 0
        self.polls_free = 0

    def session(self, pcm16: bytes, pace: float | None, record: bool) -> None:
        config = StreamConfig(encoding="linear16", sample_rate_hz=RATE, interim_results=False)
        with self.lock:
            self.held += 1
        try:
            with SpeechClient(self.target) as client:
                began = time.monotonic()
                for r in client.stream(config, pieces(pcm16), pace=pace):
                    if record and r.WhichOneof("response") == "result" and r.result.is_final and r.result.text:
                        end_s = r.result.end_offset.seconds + r.result.end_offset.nanos / 1e9
                        self.delays.append(time.monotonic() - (began + end_s))
                        self.words += len(r.result.text.split())
        finally:
            with self.lock:
                self.held -= 1

    def caller(self, clips: list[bytes], offset: int) -> None:
        k = offset
        while time.monotonic() < self.until:
            if self.tried(clips[k % len(clips)], 1.0, record=True):
                k += 3
            time.sleep(2.0)

    def hold(self, music: bytes, unpaced: bool) -> None:
        while time.monotonic() < self.until:
            if not self.tried(music, None if unpaced else 1.0, record=False):
                time.sleep(1.0)

    def tried(self, pcm16: bytes, pace: float | None, record: bool) -> bool:
        """A caller's session; False when refused (the prober may hold the last slot): it calls again."""
        try:
            self.session(pcm16, pace, record)
            return True
        except grpc.RpcError:
            self.callers_refused += 1
            return False

    def prober(self, second: bytes) -> None:
        while time.monotonic() < self.until:
            time.sleep(PROBE_EVERY_S)
            try:
                self.session(second, 1.0, record=False)
                self.admitted += 1
            except grpc.RpcError as e:
                if FULL in (e.details() or ""):
                    self.refused_full += 1
                else:
                    self.refused_free.append(e.details() or "")

    def health(self) -> None:
        stub = health_pb2_grpc.HealthStub(grpc.insecure_channel(self.target))
        while time.monotonic() < self.until:
            with self.lock:
                free = self.held < 4
            if free:
                self.polls_free += 1
                request = health_pb2.HealthCheckRequest(service="voxgate.v1.Speech")
                if stub.Check(request, timeout=5).status != health_pb2.HealthCheckResponse.SERVING:
                    self.not_serving_free += 1
            time.sleep(0.5)


def measure(neighbour: str, args: argparse.Namespace, clips: list[bytes]) -> dict[str, Any]:
    proc, target = start_server("whisper", 0, ("--max-sessions", "4", "--speech-detector", args.detector))
    try:
        run = Run(target, args.seconds)
        music = to_pcm16(synthesize(args.music, args.seconds + 10, seed=args.seed, dbfs=-20))
        threads = [threading.Thread(target=run.caller, args=(clips, k)) for k in range(3)]
        if neighbour == "hold":
            threads.append(threading.Thread(target=run.hold, args=(music, args.unpaced)))
        threads += [
            threading.Thread(target=run.prober, args=(clips[0][: RATE * 2],)),
            threading.Thread(target=run.health),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        proc.terminate()
        proc.wait(30)
    delays = sorted(run.delays)
    return {
        "neighbour": neighbour,
        "finals": len(delays),
        "words": run.words,
        "final_delay_p50_s": round(statistics.median(delays), 2) if delays else None,
        "final_delay_p95_s": round(delays[int(0.95 * (len(delays) - 1))], 2) if delays else None,
        "callers_refused": run.callers_refused,
        "probe_admitted": run.admitted,
        "probe_refused_full": run.refused_full,
        "probe_refused_while_free": len(run.refused_free),
        "refusals_while_free": run.refused_free[:3],
        "not_serving_while_free": f"{run.not_serving_free}/{run.polls_free}",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--music", default="pad")
    parser.add_argument("--seed", type=int, default=7, help="of the music")
    parser.add_argument("--unpaced", action="store_true", help="the hold caller sends as fast as it can")
    parser.add_argument("--detector", default="silero", choices=("webrtcvad", "silero"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    clips = [c.pcm16k for c in load_corpus(WER_CORPUS)]
    rows = [measure(n, args, clips) for n in ("none", "hold")]
    base, held = rows
    if base["final_delay_p95_s"] and held["final_delay_p95_s"]:
        held["p95_ratio_to_none"] = round(held["final_delay_p95_s"] / base["final_delay_p95_s"], 2)
    for row in rows:
        print(json.dumps(row))
    if args.out:
        args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)}, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
