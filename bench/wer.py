"""WER of the embedded PocketSphinx engine alone and through voxgate, on the same samples.

For every clip of a corpus (a folder with WAVs and a manifest.json of {file, text}; default: the
fixtures in tests/fixtures/audio) and every client encoding (16 kHz LINEAR16, 8 kHz mu-law and
A-law: the clip band-limited to 8 kHz with soxr HQ, then companded):

- direct: PocketSphinx on its own streaming API (fresh decoder, start_utt, process_raw in 80 ms
  chunks, end_utt, its final hypothesis) fed exactly the samples voxgate's engine gets for that
  audio: the service's own decode, resampling and 20 ms framing (service.audio.pipeline);
- through voxgate: the same audio bytes streamed with the Python client, unpaced, in 20/80/320 ms
  client messages, interim results on, endpointing 10 s (one utterance per clip); the
  concatenated final results.

Prints a markdown table (corpus-level WER: edits / reference words) and writes a JSON report.
With --check, exits 1 when through-voxgate WER exceeds direct + 0.01 anywhere.

    .venv/bin/python bench/wer.py [--server HOST:PORT] [--corpus DIR] [--check] [--out FILE]

Without --server it starts `voxgate serve --engine sphinx` on a free port and stops it after.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
import wave
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import grpc
import numpy as np
import soxr
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "clients/python")]  # run as a script from anywhere

from service.audio.decode import Encoding  # noqa: E402
from service.audio.pipeline import AudioPipeline, EngineChunk  # noqa: E402
from service.bench.wer import normalize, word_errors  # noqa: E402
from voxgate_client import SpeechClient, StreamConfig  # noqa: E402
from voxgate_client.g711 import encode_alaw, encode_mulaw  # noqa: E402

ENGINE_CHUNK_BYTES = 2560  # 80 ms at 16 kHz, as the service sends it
ONE_UTTERANCE_SILENCE_MS = 10000  # the server's largest endpointing silence: one utterance per clip
ENCODINGS = {"linear16": (Encoding.LINEAR16, 16000), "mulaw": (Encoding.MULAW, 8000), "alaw": (Encoding.ALAW, 8000)}
CHUNK_MS = (20, 80, 320)
MAX_EXCESS = 0.01


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


def load_corpus(folder: Path) -> list[Clip]:
    clips = []
    for entry in json.loads((folder / "manifest.json").read_text()):
        with wave.open(str(folder / entry["file"])) as w:
            if (w.getnchannels(), w.getsampwidth(), w.getframerate()) != (1, 2, 16000):
                raise SystemExit(f"{entry['file']}: 16 kHz mono PCM16 WAV expected")
            clips.append(Clip(entry["file"], entry["text"], w.readframes(w.getnframes())))
    return clips


def client_audio(pcm16k: bytes, encoding: str) -> tuple[bytes, int]:
    """The bytes a client sends for this clip in `encoding`, and their sample rate."""
    if encoding == "linear16":
        return pcm16k, 16000
    narrow = soxr.resample(np.frombuffer(pcm16k, dtype="<i2"), 16000, 8000, quality="HQ").astype(np.int16)
    return (encode_mulaw(narrow) if encoding == "mulaw" else encode_alaw(narrow)), 8000


def engine_samples(data: bytes, encoding: str) -> bytes:
    """The 16 kHz PCM16 voxgate's engine gets for these client bytes (decode, resample, 20 ms framing)."""
    kind, rate = ENCODINGS[encoding]
    pipeline = AudioPipeline(kind, rate, vad_aggressiveness=2, silence_ms=ONE_UTTERANCE_SILENCE_MS)
    outputs = pipeline.push(data) + pipeline.finish()
    return b"".join(o.pcm16 for o in outputs if isinstance(o, EngineChunk))


def sphinx_final(pcm16: bytes) -> str:
    """PocketSphinx alone: its own final hypothesis for these samples as one utterance."""
    from pocketsphinx import Decoder

    decoder = Decoder(samprate=16000, loglevel="FATAL")
    decoder.start_utt()
    for i in range(0, len(pcm16), ENGINE_CHUNK_BYTES):
        decoder.process_raw(pcm16[i:i + ENGINE_CHUNK_BYTES], False, False)
    decoder.end_utt()
    hyp = decoder.hyp()
    return hyp.hypstr if hyp is not None else ""


def _messages(data: bytes, size: int) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i:i + size]


def through_voxgate(target: str, data: bytes, encoding: str, chunk_ms: int) -> str:
    """The concatenated final results of one unpaced session streaming `data`."""
    rate = ENCODINGS[encoding][1]
    size = rate * chunk_ms // 1000 * (2 if encoding == "linear16" else 1)
    config = StreamConfig(encoding=encoding, sample_rate_hz=rate, interim_results=True,
                          endpointing_silence_ms=ONE_UTTERANCE_SILENCE_MS)
    finals = []
    with SpeechClient(target) as client:
        for response in client.stream(config, _messages(data, size), pace=None):
            if response.WhichOneof("response") == "result" and response.result.is_final:
                finals.append(response.result.text)
    return " ".join(t.strip() for t in finals if t.strip())


def measure(target: str, clips: Sequence[Clip], encodings: Sequence[str], chunks: Sequence[int]
            ) -> tuple[list[Row], list[dict[str, object]]]:
    rows: list[Row] = []
    texts: list[dict[str, object]] = []
    for encoding in encodings:
        audio = [client_audio(c.pcm16k, encoding)[0] for c in clips]
        direct = [sphinx_final(engine_samples(a, encoding)) for a in audio]
        words = sum(len(normalize(c.text)) for c in clips)
        rows.append(Row(encoding, 0, words, sum(word_errors(c.text, d) for c, d in zip(clips, direct, strict=True)),
                        len(clips), len(clips)))
        for chunk_ms in chunks:
            through = [through_voxgate(target, a, encoding, chunk_ms) for a in audio]
            rows.append(Row(encoding, chunk_ms, words,
                            sum(word_errors(c.text, t) for c, t in zip(clips, through, strict=True)),
                            sum(normalize(t) == normalize(d) for t, d in zip(through, direct, strict=True)),
                            len(clips)))
            texts += [{"file": c.file, "encoding": encoding, "chunk_ms": chunk_ms, "reference": c.text,
                       "direct": d, "through": t} for c, d, t in zip(clips, direct, through, strict=True)]
    return rows, texts


def table(rows: Sequence[Row]) -> str:
    lines = ["| client audio | path | words | WER | finals identical to direct |", "|---|---|---|---|---|"]
    for r in rows:
        path = "direct (engine alone)" if r.chunk_ms == 0 else f"through voxgate, {r.chunk_ms} ms messages"
        label = {"linear16": "16 kHz LINEAR16", "mulaw": "8 kHz mu-law", "alaw": "8 kHz A-law"}[r.encoding]
        lines.append(f"| {label} | {path} | {r.words} | {r.wer:.3f} | {r.identical}/{r.clips} |")
    return "\n".join(lines)


def excesses(rows: Sequence[Row]) -> list[str]:
    """Conditions where through-voxgate WER exceeds direct + MAX_EXCESS."""
    direct = {r.encoding: r.wer for r in rows if r.chunk_ms == 0}
    return [f"{r.encoding} {r.chunk_ms} ms: {r.wer:.3f} > {direct[r.encoding]:.3f} + {MAX_EXCESS}"
            for r in rows if r.chunk_ms and r.wer > direct[r.encoding] + MAX_EXCESS]


def start_sphinx_server() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "service", "serve", "--port", "0", "--engine", "sphinx"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
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
            if health.Check(health_pb2.HealthCheckRequest(service="voxgate.v1.Speech"), timeout=5).status == \
                    health_pb2.HealthCheckResponse.SERVING:
                return proc, target
        except grpc.RpcError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("the server never became ready")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", help="a running voxgate server with the sphinx engine (default: start one)")
    parser.add_argument("--corpus", type=Path, default=ROOT / "tests/fixtures/audio")
    parser.add_argument("--encodings", default=",".join(ENCODINGS))
    parser.add_argument("--chunks", default=",".join(map(str, CHUNK_MS)), help="client message sizes, ms")
    parser.add_argument("--check", action="store_true", help=f"exit 1 if through > direct + {MAX_EXCESS}")
    parser.add_argument("--out", type=Path, help="JSON report (default: none)")
    args = parser.parse_args(argv)
    clips = load_corpus(args.corpus)
    proc, target = (None, args.server) if args.server else start_sphinx_server()
    try:
        rows, texts = measure(target, clips, args.encodings.split(","), [int(c) for c in args.chunks.split(",")])
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
    print(f"{len(clips)} clips, {rows[0].words} reference words ({args.corpus})")
    print(table(rows))
    if args.out:
        args.out.write_text(json.dumps({"corpus": str(args.corpus), "clips": len(clips),
                                        "rows": [{**asdict(r), "wer": r.wer} for r in rows], "texts": texts},
                                       indent=1))
    failed = excesses(rows)
    for line in failed:
        print("through voxgate is worse than the engine alone:", line, file=sys.stderr)
    return 1 if args.check and failed else 0


if __name__ == "__main__":
    sys.exit(main())
