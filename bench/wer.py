"""WER of an embedded engine (whisper, sphinx) alone and through voxgate, on the same samples.

For every clip of a corpus (one or more folders with WAVs and a manifest.json of {file, text};
default: the fixtures in tests/fixtures/audio plus the WER corpus in tests/fixtures/wer_corpus: 27
clips, 396 words, at least 8 real speakers) and every client encoding (16 kHz LINEAR16, 8 kHz mu-law
and A-law: the clip band-limited to 8 kHz with soxr HQ, then companded):

- direct: the engine's model alone, fed exactly the samples voxgate's engine gets for that audio
  (the service's own decode, resampling and 20 ms framing: service.audio.pipeline): PocketSphinx
  on its streaming API (fresh decoder, process_raw in 80 ms chunks, its final hypothesis), Whisper
  as one decode of the whole clip (engine_sidecar/engines/whisper/decoder.py);
- through voxgate: the same audio bytes streamed with the Python client, unpaced, in 20/80/320 ms
  client messages, interim results on, endpointing 10 s (one utterance per clip); the
  concatenated final results.

Prints a markdown table (corpus-level WER: edits / reference words) and writes a JSON report.
With --check, exits 1 when through-voxgate WER exceeds direct + 0.01 anywhere.

    .venv/bin/python bench/wer.py [--engine whisper|sphinx] [--server HOST:PORT] [--corpus DIR ...]
        [--check] [--out FILE]

Without --server it starts `voxgate serve --engine ENGINE` (default whisper) on a free port and stops it after, with
its final-flush and freeze watchdogs at --watchdog-s (120 s): at their defaults (10 s, 15 s) an
overloaded host (load 8 on 2 cores) makes PocketSphinx's final pass over a 10-25 s utterance late,
the session is reset (a seam: the interim text becomes final, the audio is replayed and decoded
again) and the text differs, which measures the host rather than the text path. The
sessions through voxgate run one at a time in a background thread while this process decodes the
direct side, so the server and the direct decoder use a core each.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import re
import subprocess
import sys
import time
import wave
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import soxr
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "clients/python")]  # run as a script from anywhere

from engine_api.audio import BYTES_PER_MS, SAMPLE_RATE_HZ  # noqa: E402
from engine_api.audio import CHUNK_MS as ENGINE_CHUNK_MS  # noqa: E402
from service.audio.decode import Encoding  # noqa: E402
from service.audio.pipeline import AudioPipeline, EngineChunk  # noqa: E402
from service.bench.wer import normalize, word_errors  # noqa: E402
from voxgate_client import Phrase, SpeechClient, StreamConfig  # noqa: E402
from voxgate_client.g711 import encode_alaw, encode_mulaw  # noqa: E402

ENGINE_CHUNK_BYTES = ENGINE_CHUNK_MS * BYTES_PER_MS  # 80 ms at 16 kHz, as the service sends it
ONE_UTTERANCE_SILENCE_MS = 10000  # the server's largest endpointing silence: one utterance per clip
# The client encodings measured (the service's own Encoding), each at the rate clients send it: G.711 as
# telephony carries it, at 8 kHz. Conditions and the report name them by their wire names ("mulaw").
RATE_HZ = {Encoding.LINEAR16: SAMPLE_RATE_HZ, Encoding.MULAW: 8000, Encoding.ALAW: 8000}
ENCODINGS = tuple(kind.value for kind in RATE_HZ)
CHUNK_MS = (20, 80, 320)
MAX_EXCESS = 0.01
WATCHDOG_S = 120.0  # --final-flush-timeout-s and --freeze-timeout-s of the server this starts
FIXTURES = ROOT / "tests/fixtures/audio"
WER_CORPUS = ROOT / "tests/fixtures/wer_corpus"


@dataclass(frozen=True)
class Clip:
    file: str
    text: str
    pcm16k: bytes


@dataclass(frozen=True)
class Row:
    encoding: str
    chunk_ms: int  # 0: direct (no client)
    words: int
    errors: int
    identical: int  # clips whose text equals the direct text
    clips: int

    @property
    def wer(self) -> float:
        return self.errors / max(self.words, 1)


def load_corpus(*folders: Path) -> list[Clip]:
    """The clips of every folder's manifest.json, in order."""
    return [clip for folder in folders for clip in _load_folder(folder)]


def _load_folder(folder: Path) -> list[Clip]:
    clips = []
    for entry in json.loads((folder / "manifest.json").read_text()):
        with wave.open(str(folder / entry["file"])) as w:
            if (w.getnchannels(), w.getsampwidth(), w.getframerate()) != (1, 2, 16000):
                raise SystemExit(f"{entry['file']}: 16 kHz mono PCM16 WAV expected")
            clips.append(Clip(entry["file"], entry["text"], w.readframes(w.getnframes())))
    return clips


def client_audio(pcm16k: bytes, encoding: str) -> tuple[bytes, int]:
    """The bytes a client sends for this clip in `encoding`, and their sample rate."""
    kind = Encoding(encoding)
    rate = RATE_HZ[kind]
    if kind is Encoding.LINEAR16:
        return pcm16k, rate
    narrow = soxr.resample(np.frombuffer(pcm16k, dtype="<i2"), SAMPLE_RATE_HZ, rate, quality="HQ").astype(np.int16)
    return (encode_mulaw(narrow) if kind is Encoding.MULAW else encode_alaw(narrow)), rate


def engine_chunks(data: bytes, encoding: str) -> list[EngineChunk]:
    """The 16 kHz PCM16 chunks, with their VAD flags, that voxgate's engine gets for these client bytes
    (decode, resample, 20 ms framing, VAD)."""
    kind = Encoding(encoding)
    pipeline = AudioPipeline(kind, RATE_HZ[kind], vad_aggressiveness=2, silence_ms=ONE_UTTERANCE_SILENCE_MS)
    return [o for o in pipeline.push(data) + pipeline.finish() if isinstance(o, EngineChunk)]


def engine_samples(data: bytes, encoding: str) -> bytes:
    """The 16 kHz PCM16 voxgate's engine gets for these client bytes."""
    return b"".join(c.pcm16 for c in engine_chunks(data, encoding))


def sphinx_final(pcm16: bytes) -> str:
    """PocketSphinx alone: its own final hypothesis for these samples as one utterance."""
    from pocketsphinx import Decoder

    decoder = Decoder(samprate=SAMPLE_RATE_HZ, loglevel="FATAL")
    decoder.start_utt()
    for i in range(0, len(pcm16), ENGINE_CHUNK_BYTES):
        decoder.process_raw(pcm16[i : i + ENGINE_CHUNK_BYTES], False, False)
    decoder.end_utt()
    hyp = decoder.hyp()
    return hyp.hypstr if hyp is not None else ""


@functools.cache
def _whisper_decoder() -> Any:
    """One WhisperDecoder for the direct side (loading it takes a second)."""
    from engine_sidecar.engines.whisper.decoder import WhisperDecoder
    from engine_sidecar.engines.whisper.model import default_source

    return WhisperDecoder(default_source().directory, threads=1)


def whisper_final(chunks: Sequence[EngineChunk]) -> str:
    """Whisper alone: the transcription of the samples the engine decodes for one utterance of these chunks
    (from its pre-roll before the first speech on: UtteranceAudio)."""
    from engine_sidecar.engines.whisper.engine import UtteranceAudio

    decoder = _whisper_decoder()
    audio = UtteranceAudio(0)
    for chunk in chunks:
        audio.add(chunk.pcm16, chunk.speech)
    return " ".join(w.text for w in decoder.transcribe(bytes(audio.pcm16), 0).words) if audio.speech else ""


DIRECT: dict[str, Callable[[Sequence[EngineChunk]], str]] = {
    "sphinx": lambda chunks: sphinx_final(b"".join(c.pcm16 for c in chunks)),
    "whisper": whisper_final,
}
ENGINES = tuple(DIRECT)


def _messages(data: bytes, size: int) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def through_voxgate(target: str, data: bytes, encoding: str, chunk_ms: int, phrases: tuple[Phrase, ...] = ()) -> str:
    """The concatenated final results of one unpaced session streaming `data` (with phrase hints)."""
    kind = Encoding(encoding)
    rate = RATE_HZ[kind]
    size = rate * chunk_ms // 1000 * kind.bytes_per_sample
    config = StreamConfig(
        encoding=encoding,
        sample_rate_hz=rate,
        interim_results=True,
        endpointing_silence_ms=ONE_UTTERANCE_SILENCE_MS,
        phrases=phrases,
    )
    finals = []
    with SpeechClient(target) as client:
        for response in client.stream(config, _messages(data, size), pace=None):
            if response.WhichOneof("response") == "result" and response.result.is_final:
                finals.append(response.result.text)
    return " ".join(t.strip() for t in finals if t.strip())


def measure(
    target: str, clips: Sequence[Clip], encodings: Sequence[str], chunks: Sequence[int], engine: str = "whisper"
) -> tuple[list[Row], list[dict[str, object]]]:
    """Every clip in every encoding: direct, and through voxgate at every message size."""
    return measure_conditions(target, {(e, c): list(clips) for e in encodings for c in chunks}, engine)


def rotation(
    clips: Sequence[Clip], encodings: Sequence[str] = ENCODINGS, chunks: Sequence[int] = CHUNK_MS
) -> dict[tuple[str, int], list[Clip]]:
    """Each clip in one (encoding, message size), taken in turn: every condition, every clip, 1/9 the cost."""
    conditions = [(e, c) for e in encodings for c in chunks]
    assigned: dict[tuple[str, int], list[Clip]] = {cond: [] for cond in conditions}
    for clip, cond in zip(clips, itertools.cycle(conditions)):
        assigned[cond].append(clip)
    return assigned


def measure_conditions(
    target: str, conditions: dict[tuple[str, int], list[Clip]], engine: str = "whisper"
) -> tuple[list[Row], list[dict[str, object]]]:
    """For each (encoding, message size) its clips direct and through voxgate: one direct row per encoding
    (over the clips of its conditions) when every condition of an encoding has the same clips, else one per
    condition (chunk_ms negative: the direct side of that message size)."""
    encodings = list(dict.fromkeys(e for e, _ in conditions))
    shared = {
        e: len({tuple(c.file for c in clips) for (e2, _), clips in conditions.items() if e2 == e}) == 1
        for e in encodings
    }
    audio: dict[tuple[str, str], bytes] = {}
    for (encoding, _), clips in conditions.items():
        for clip in clips:
            audio.setdefault((clip.file, encoding), client_audio(clip.pcm16k, encoding)[0])
    with ThreadPoolExecutor(1) as pool:  # the server decodes these while this process decodes the direct side
        through = {
            (clip.file, e, c): pool.submit(through_voxgate, target, audio[clip.file, e], e, c)
            for (e, c), clips in conditions.items()
            for clip in clips
        }
        direct = {key: DIRECT[engine](engine_chunks(data, key[1])) for key, data in audio.items()}
        texts_through = {key: future.result() for key, future in through.items()}
    rows: list[Row] = []
    texts: list[dict[str, object]] = []
    for encoding in encodings:
        conds = [(c, clips) for (e, c), clips in conditions.items() if e == encoding]
        direct_rows = [(0, conds[0][1])] if shared[encoding] else [(-c, clips) for c, clips in conds]
        for chunk_ms, clips in [*direct_rows, *conds]:
            d = [direct[c.file, encoding] for c in clips]
            t = d if chunk_ms <= 0 else [texts_through[c.file, encoding, chunk_ms] for c in clips]
            rows.append(
                Row(
                    encoding,
                    chunk_ms,
                    sum(len(normalize(c.text)) for c in clips),
                    sum(word_errors(c.text, h) for c, h in zip(clips, t, strict=True)),
                    sum(normalize(a) == normalize(b) for a, b in zip(t, d, strict=True)),
                    len(clips),
                )
            )
            if chunk_ms > 0:
                texts += [
                    {
                        "file": c.file,
                        "encoding": encoding,
                        "chunk_ms": chunk_ms,
                        "reference": c.text,
                        "direct": a,
                        "through": b,
                    }
                    for c, a, b in zip(clips, d, t, strict=True)
                ]
    return rows, texts


def table(rows: Sequence[Row]) -> str:
    lines = ["| client audio | path | words | WER | finals identical to direct |", "|---|---|---|---|---|"]
    for r in rows:
        path = (
            "direct (engine alone)"
            if r.chunk_ms == 0
            else f"direct, the clips of {-r.chunk_ms} ms"
            if r.chunk_ms < 0
            else f"through voxgate, {r.chunk_ms} ms messages"
        )
        kind = Encoding(r.encoding)
        label = f"{RATE_HZ[kind] // 1000} kHz {kind.name}"
        lines.append(f"| {label} | {path} | {r.words} | {r.wer:.3f} | {r.identical}/{r.clips} |")
    return "\n".join(lines)


def excesses(rows: Sequence[Row]) -> list[str]:
    """Conditions where through-voxgate WER exceeds direct (on the same clips) + MAX_EXCESS."""
    direct = {(r.encoding, -r.chunk_ms): r.wer for r in rows if r.chunk_ms <= 0}

    def base(r: Row) -> float:
        return direct.get((r.encoding, r.chunk_ms), direct.get((r.encoding, 0), 0.0))

    return [
        f"{r.encoding} {r.chunk_ms} ms: {r.wer:.3f} > {base(r):.3f} + {MAX_EXCESS}"
        for r in rows
        if r.chunk_ms > 0 and r.wer > base(r) + MAX_EXCESS
    ]


def watchdog_args(seconds: float = WATCHDOG_S) -> list[str]:
    """Server flags: the final-flush and freeze watchdogs at `seconds` (0: the server's defaults)."""
    return ["--final-flush-timeout-s", str(seconds), "--freeze-timeout-s", str(seconds)] if seconds else []


def start_server(
    engine: str, watchdog_s: float = WATCHDOG_S, extra: Sequence[str] = ()
) -> tuple[subprocess.Popen[str], str]:
    """`voxgate serve` on a free port (with `extra` flags), once it serves; its process and address."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "service",
            "serve",
            "--port",
            "0",
            "--engine",
            engine,
            *watchdog_args(watchdog_s),
            *extra,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    match = re.search(r"listening on (\S+)", proc.stdout.readline())
    if not match:
        proc.kill()
        raise SystemExit("the server did not start")
    target = match.group(1)
    health = health_pb2_grpc.HealthStub(grpc.insecure_channel(target))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if (
                health.Check(health_pb2.HealthCheckRequest(service="voxgate.v1.Speech"), timeout=5).status
                == health_pb2.HealthCheckResponse.SERVING
            ):
                return proc, target
        except grpc.RpcError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("the server never became ready")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=ENGINES, default="whisper", help="the engine measured")
    parser.add_argument("--server", help="a running voxgate server with that engine (default: start one)")
    parser.add_argument(
        "--corpus",
        type=Path,
        nargs="+",
        default=[FIXTURES, WER_CORPUS],
        help="folders with a manifest.json (default: the fixtures and tests/fixtures/wer_corpus)",
    )
    parser.add_argument(
        "--rotate",
        action="store_true",
        help="each clip in one (encoding, message size) in turn instead of all of them (CI's check)",
    )
    parser.add_argument("--encodings", default=",".join(ENCODINGS))
    parser.add_argument("--chunks", default=",".join(map(str, CHUNK_MS)), help="client message sizes, ms")
    parser.add_argument(
        "--watchdog-s",
        type=float,
        default=WATCHDOG_S,
        help="final-flush and freeze timeouts of the server it starts (0: the server's defaults)",
    )
    parser.add_argument(
        "--lead-ms",
        type=int,
        default=0,
        help="silence put before every clip: a decode depends on where its audio starts, so a change that moves "
        "an utterance's start is judged over several leads, not one",
    )
    parser.add_argument("--check", action="store_true", help=f"exit 1 if through > direct + {MAX_EXCESS}")
    parser.add_argument("--out", type=Path, help="JSON report (default: none)")
    args = parser.parse_args(argv)
    lead = bytes(args.lead_ms * BYTES_PER_MS)
    clips = [replace(c, pcm16k=lead + c.pcm16k) for c in load_corpus(*args.corpus)]
    encodings, chunks = args.encodings.split(","), [int(c) for c in args.chunks.split(",")]
    proc, target = (None, args.server) if args.server else start_server(args.engine, args.watchdog_s)
    try:
        rows, texts = (
            measure_conditions(target, rotation(clips, encodings, chunks), args.engine)
            if args.rotate
            else measure(target, clips, encodings, chunks, args.engine)
        )
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
    corpus = " + ".join(str(c.relative_to(ROOT)) if c.is_relative_to(ROOT) else str(c) for c in args.corpus)
    words = sum(len(normalize(c.text)) for c in clips)
    print(f"engine {args.engine}: {len(clips)} clips, {words} reference words ({corpus})")
    print(table(rows))
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "engine": args.engine,
                    "corpus": corpus,
                    "clips": len(clips),
                    "rotate": args.rotate,
                    "lead_ms": args.lead_ms,
                    "rows": [{**asdict(r), "wer": r.wer} for r in rows],
                    "texts": texts,
                },
                indent=1,
            )
        )
    failed = excesses(rows)
    for line in failed:
        print("through voxgate is worse than the engine alone:", line, file=sys.stderr)
    return 1 if args.check and failed else 0


if __name__ == "__main__":
    sys.exit(main())
