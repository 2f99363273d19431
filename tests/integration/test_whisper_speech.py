"""Real speech through the public API on the embedded Whisper engine (the default), end to end: the words
are right, at 16 kHz and as 8 kHz telephony audio, and the final is the model's own decode of the samples."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.wer import WER_CORPUS, client_audio, engine_chunks, load_corpus, whisper_final
from engine_api.outputs import EngineOutput, Revision
from engine_sidecar.engines import create_engine
from engine_sidecar.engines.whisper.engine import SEGMENT_MS
from engine_sidecar.engines.whisper.model import default_source
from tests.helpers import (
    ROOT,
    ServerProcess,
    audio_requests,
    config_request,
    final_text,
    live,
    read_wav_pcm,
    recognize,
    silence,
    word_error_rate,
)
from tests.readme_examples import Example, Final, readme_examples
from voxgate_client.v1 import speech_pb2 as pb

ONE_UTTERANCE = pb.EndpointingConfig(silence_ms=10000)


def transcribe(server: ServerProcess, *args: str) -> list[Final]:
    """`voxgate transcribe` as the README runs it: the finals it prints."""
    out = subprocess.run(
        [sys.executable, "-m", "service", "transcribe", "--server", server.target, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    return [f for f in map(Final.parse, out.stdout.splitlines()) if f is not None]


def test_paced_speech_gives_growing_interims_then_the_final(whisper_server: ServerProcess) -> None:
    pcm, rate = read_wav_pcm("librivox_amiable_woman.wav")
    chunk = rate // 10 * 2  # 100 ms
    responses = recognize(whisper_server.stub(), live(config_request(), audio_requests(pcm + silence(1.0), chunk), 0.1))
    assert responses[0].started.engine.name == "whisper"
    assert responses[0].started.interim_stability == pb.INTERIM_STABILITY_REVISABLE
    results = [r.result for r in responses if r.HasField("result")]
    first_final = next(i for i, r in enumerate(results) if r.is_final)
    interims = results[:first_final]
    assert len(interims) >= 2, "a paced utterance of several seconds gets interims before its final"
    for before, after in zip(interims, interims[1:], strict=False):
        assert after.text.startswith(before.text)  # interims only grow within an utterance
    reference = "had he married a more a amiable woman he might have been made still more respectable than he was"
    assert word_error_rate(reference, final_text(responses)) <= 0.2


@pytest.mark.parametrize("encoding", ["linear16", "mulaw", "alaw"])
def test_the_final_is_the_models_decode_of_the_samples_in_every_encoding(
    whisper_server: ServerProcess, encoding: str
) -> None:
    pcm16k, _ = read_wav_pcm("flite_rms_call_me_back.wav")
    data, rate = client_audio(pcm16k, encoding)
    enc = {"linear16": pb.AUDIO_ENCODING_LINEAR16, "mulaw": pb.AUDIO_ENCODING_MULAW, "alaw": pb.AUDIO_ENCODING_ALAW}
    config = config_request(encoding=enc[encoding], sample_rate_hz=rate, endpointing=ONE_UTTERANCE)
    text = final_text(recognize(whisper_server.stub(), [config, *audio_requests(data, 1600)]))
    assert text.split() == whisper_final(engine_chunks(data, encoding)).split()
    assert word_error_rate("please call me back tomorrow morning", text) == 0


README_EXAMPLES = readme_examples(ROOT / "README.md")


def test_the_readme_shows_every_transcribe_example_with_its_finals() -> None:
    shown = {e.args[-1].rsplit("/", 1)[-1] for e in README_EXAMPLES}
    assert len(README_EXAMPLES) == 5, README_EXAMPLES
    assert "please_put_me_through_rms.wav" in shown and "call_me_back_8k.alaw" in shown


@pytest.mark.parametrize("example", README_EXAMPLES, ids=lambda e: e.args[-1].rsplit("/", 1)[-1])
def test_the_readme_commands_print_what_the_readme_shows(whisper_server: ServerProcess, example: Example) -> None:
    # The same words as the README's line and times within TIME_TOLERANCE_S: what holds on every CPU.
    # Punctuation, capitals and the last word's end follow the CPU's arithmetic (tests/numeric_paths.py).
    pace = () if "--speed" in example.args else ("--no-pace",)
    printed = transcribe(whisper_server, *pace, *example.args)
    assert len(printed) == len(example.finals), printed
    for got, shown in zip(printed, example.finals, strict=True):
        assert got.agrees_with(shown), f"printed {got}, the README shows {shown}"
    if "--phrase" in example.args:  # the hint's own spelling, capitals included: the speller writes it
        assert "Siobhan Kowalczyk" in printed[0].text


def test_a_corrupted_model_stops_the_server_at_start_with_the_file_and_the_fix(tmp_path: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(default_source().directory, model)
    (model / "config.json").write_text("{}")
    done = subprocess.run(
        [sys.executable, "-m", "service", "serve", "--port", "0", "--engine", "whisper", "--model", str(model)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 1
    assert f"voxgate sidecar: {model / 'config.json'} has no alignment_heads" in done.stderr
    assert "Traceback" not in done.stderr
    assert "sidecar exited with 1 before it was ready" in done.stderr


async def test_an_utterance_longer_than_a_segment_loses_no_speech() -> None:
    # 78 s without a flush: a sonnet read aloud, then spontaneous speech. The engine cuts it into pieces of
    # at most 25 s after a word, and each piece's decode goes on where Whisper ended its text early (here it
    # did, at the change of speaker, before WhisperDecoder.transcribe).
    clips = [c for c in load_corpus(WER_CORPUS) if c.file.startswith(("librivox_shakespeare", "mfa_acoustic"))]
    pcm, reference = b"".join(c.pcm16k for c in clips), " ".join(c.text for c in clips)
    engine = create_engine("whisper", "", max_sessions=1)
    await engine.start()
    session = await engine.open_session("long", "en")
    outputs: list[EngineOutput] = []

    async def read() -> None:
        outputs.extend([o async for o in session.outputs()])

    reader = asyncio.ensure_future(read())
    for i in range(0, len(pcm), 2560):
        await session.push_audio(pcm[i : i + 2560], True)
        await asyncio.sleep(0)
    await session.close()
    await asyncio.wait_for(reader, 300)
    await engine.shutdown()
    text = ""
    for out in outputs:
        text = "".join(d.text for d in out.deltas) if isinstance(out, Revision) else text + getattr(out, "text", "")
    assert len(pcm) / 32000 > 3 * SEGMENT_MS / 1000
    assert word_error_rate(reference, text) <= 0.2, text
