"""Real speech through the public API on the embedded PocketSphinx engine, end to end."""

from __future__ import annotations

import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest
import soxr

from bench.wer import engine_samples, sphinx_final
from service.bench.wer import normalize
from tests.helpers import (
    ROOT,
    ServerProcess,
    audio_requests,
    config_request,
    final_text,
    finals,
    fixture_clips,
    live,
    read_wav_pcm,
    recognize,
    seconds,
    silence,
    word_error_rate,
)
from voxgate_client.g711 import decode_alaw, decode_mulaw, encode_alaw, encode_mulaw
from voxgate_client.v1 import speech_pb2 as pb

MAX_WER = 0.25  # PocketSphinx scores 0.0 on these clips decoded whole; streaming may lose a word
ONE_UTTERANCE = pb.EndpointingConfig(silence_ms=10000)  # longer than any pause in the fixtures


def kinds(responses: list[pb.StreamingRecognizeResponse]) -> list[str]:
    return [str(r.WhichOneof("response")) for r in responses]


def test_paced_real_speech_gives_interims_then_a_final(sphinx_server: ServerProcess) -> None:
    pcm, rate = read_wav_pcm("go_forward.wav")
    duration = len(pcm) / 2 / rate
    chunk = rate // 10 * 2  # 100 ms
    requests = live(config_request(), audio_requests(pcm + silence(1.0), chunk), 0.1)
    responses = recognize(sphinx_server.stub(), requests)

    assert [r.seq for r in responses] == list(range(1, len(responses) + 1))
    assert kinds(responses)[0] == "started" and kinds(responses)[-1] == "ended"
    assert responses[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END
    assert word_error_rate("go forward ten meters", final_text(responses)) <= MAX_WER
    assert responses[0].started.interim_stability == pb.INTERIM_STABILITY_REVISABLE

    results = [r.result for r in responses if r.HasField("result")]
    first_final = next(i for i, r in enumerate(results) if r.is_final)
    assert first_final > 0, "interim results must come before the final one"
    interims = [r for r in results[:first_final] if not r.is_final]
    assert not any(r.revised for r in interims)
    for before, after in zip(interims, interims[1:], strict=False):
        assert after.text.startswith(before.text) and after.text == before.text + after.delta  # append-only
    final = results[first_final]
    # The final is the decoder's own hypothesis: it extends the interim text, or says that it replaces it.
    assert final.revised == (not final.text.startswith(interims[-1].text))
    assert [w.word for w in final.words] == final.text.split()

    words = [w for r in finals(responses) for w in r.words]
    assert words
    starts = [seconds(w.start_offset) for w in words]
    assert starts == sorted(starts)
    for w in words:
        assert 0 <= seconds(w.start_offset) < seconds(w.end_offset) <= duration + 0.05

    events = [r.speech_event for r in responses if r.HasField("speech_event")]
    assert [e.type for e in events] == [pb.SPEECH_EVENT_TYPE_SPEECH_STARTED, pb.SPEECH_EVENT_TYPE_SPEECH_ENDED]
    assert seconds(events[0].offset) <= seconds(words[0].start_offset) + 0.1
    assert seconds(events[1].offset) >= seconds(words[-1].end_offset) - 0.1


@pytest.mark.parametrize("lead_s", [0.0, 1.0], ids=["speech_from_the_first_frame", "after_1s_of_silence"])
@pytest.mark.parametrize("clip", fixture_clips(), ids=lambda c: str(c["file"]))
def test_the_final_is_the_engines_own_hypothesis(sphinx_server: ServerProcess, clip: dict, lead_s: float) -> None:
    # One utterance through the public API against PocketSphinx run alone on the very samples voxgate's
    # engine gets (the service's framing pads the last 20 ms frame): the same words, none added in front.
    pcm, rate = read_wav_pcm(str(clip["file"]))
    audio = silence(lead_s) + pcm
    responses = recognize(
        sphinx_server.stub(),
        [config_request(sample_rate_hz=rate, endpointing=ONE_UTTERANCE), *audio_requests(audio, 1280)],
    )
    direct = sphinx_final(engine_samples(audio, "linear16"))
    assert len(finals(responses)) == 1
    assert final_text(responses).split() == direct.split()
    if not lead_s:  # the fixture README measured the engine alone on these clips, to a word on any CPU
        words = len(normalize(str(clip["text"])))
        assert abs(word_error_rate(str(clip["text"]), direct) - float(clip["wer_16k"])) * words <= 1 + 1e-9


def test_capabilities_announce_revisable_interims(sphinx_server: ServerProcess) -> None:
    caps = sphinx_server.stub().GetCapabilities(pb.GetCapabilitiesRequest(), timeout=10)
    assert caps.engine.name == "sphinx" and caps.interim_stability == pb.INTERIM_STABILITY_REVISABLE


def _stream_text(server: ServerProcess, data: bytes, **config: object) -> str:
    return final_text(recognize(server.stub(), [config_request(**config), *audio_requests(data, 1600)]))


def test_44k1_stereo_wav_matches_16k_mono(sphinx_server: ServerProcess, tmp_path: Path) -> None:
    pcm, rate = read_wav_pcm("go_forward.wav")
    mono = np.frombuffer(pcm, dtype="<i2")
    up = soxr.resample(mono, rate, 44100).astype(np.int16)
    stereo = np.stack([up, (up * 0.8).astype(np.int16)], axis=1)
    path = tmp_path / "stereo44k.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(44100)
        w.writeframes(stereo.astype("<i2").tobytes())
    out = subprocess.run(
        [sys.executable, "-m", "service", "transcribe", "--server", sphinx_server.target, "--no-pace", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    stereo_text = " ".join(line.split("] ", 1)[1] for line in out.stdout.splitlines() if "] " in line)
    mono_text = _stream_text(sphinx_server, pcm)
    assert word_error_rate(mono_text, stereo_text) <= MAX_WER
    assert word_error_rate("go forward ten meters", stereo_text) <= MAX_WER


@pytest.mark.parametrize(
    ("encoding", "encode", "decode"),
    [
        (pb.AUDIO_ENCODING_MULAW, encode_mulaw, decode_mulaw),
        (pb.AUDIO_ENCODING_ALAW, encode_alaw, decode_alaw),
    ],
)
def test_g711_8k_matches_the_same_audio_as_linear16(sphinx_server: ServerProcess, encoding, encode, decode) -> None:
    # PocketSphinx's model is wideband: narrowband audio recognises worse whatever the
    # decoder, so G.711 is compared with the very same samples sent as 8 kHz LINEAR16.
    pcm, rate = read_wav_pcm("flite_rms_call_me_back.wav")
    narrow = soxr.resample(np.frombuffer(pcm, dtype="<i2"), rate, 8000).astype(np.int16)
    companded = encode(narrow)
    g711_text = _stream_text(sphinx_server, companded, encoding=encoding, sample_rate_hz=8000)
    same_audio_linear = _stream_text(sphinx_server, decode(companded).astype("<i2").tobytes(), sample_rate_hz=8000)
    assert g711_text == same_audio_linear  # the service decodes G.711 exactly
    assert g711_text.split(), "narrowband speech still gives words"


def test_transcribe_cli_prints_the_engines_own_transcript(sphinx_server: ServerProcess) -> None:
    path = ROOT / "tests/fixtures/audio/cards_eight_of_spades.wav"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "service",
            "transcribe",
            "--server",
            sphinx_server.target,
            "--speed",
            "4",
            "--endpointing-silence-ms",
            "10000",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    lines = [line.split("] ", 1)[1] for line in out.stdout.splitlines() if "] " in line]
    assert len(lines) == 1  # one utterance: the pauses between the cards are shorter than 10 s
    assert lines[0].split() == sphinx_final(engine_samples(read_wav_pcm(path.name)[0], "linear16")).split()
