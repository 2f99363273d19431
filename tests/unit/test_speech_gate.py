"""--speech-detector silero: music and tones never open an utterance, speech over music ends on time, and
speech alone is kept, a hoarse voice at 8 kHz included. The real Silero model from the faster-whisper wheel,
on synthesised non-speech (bench/nonspeech_audio.py) and the fixtures' real speech."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from bench.nonspeech_audio import KINDS, at_level, synthesize, to_pcm16
from bench.wer import WER_CORPUS, client_audio, load_corpus
from service.audio.decode import Encoding
from service.audio.pipeline import AudioPipeline, EngineChunk, PipelineOutput
from service.audio.speech_model import SpeechModel, SpeechModelError, SpeechProbability, model_path, shared_model
from service.audio.vad import SpeechBoundary
from tests.helpers import read_wav_pcm

SILENCE_MS = 800
NOISE = ("white_noise", "pink_noise")  # left to webrtcvad and the engine: a hoarse voice looks like noise
TONAL = sorted(set(KINDS) - set(NOISE))
SPEECH = "librivox_amiable_woman.wav"


def run(data: bytes, detector: str, encoding: str = "linear16", rate: int = 16000) -> list[PipelineOutput]:
    pipeline = AudioPipeline(Encoding(encoding), rate, 2, SILENCE_MS, detector)
    out: list[PipelineOutput] = []
    step = rate // 5 * (2 if encoding == "linear16" else 1)  # 200 ms messages
    for i in range(0, len(data), step):
        out += pipeline.push(data[i : i + step])
    return out + pipeline.finish()


def boundaries(out: list[PipelineOutput]) -> list[tuple[bool, int]]:
    return [(o.started, o.offset_ms) for o in out if isinstance(o, SpeechBoundary)]


def speech_ms(out: list[PipelineOutput]) -> int:
    return sum(len(o.pcm16) // 32 for o in out if isinstance(o, EngineChunk) and o.speech)


def test_the_model_is_the_pinned_file_and_another_is_refused_by_name(tmp_path: Path) -> None:
    assert model_path().is_file()
    altered = tmp_path / "silero_vad_v6.onnx"
    shutil.copyfile(model_path(), altered)
    with altered.open("r+b") as f:
        f.seek(-1, 2)
        f.write(b"\0")
    with pytest.raises(SpeechModelError, match=f"{altered} has sha256 .* not the pinned"):
        SpeechModel(altered)
    with pytest.raises(SpeechModelError, match="missing"):
        SpeechModel(tmp_path / "gone.onnx")


def test_audio_in_pieces_of_any_size_gets_the_same_probabilities() -> None:
    pcm = read_wav_pcm(SPEECH)[0][: 16000 * 2 * 3]
    whole = [w.speech_probability for w in SpeechProbability(shared_model()).push(pcm)]
    pieces, detector, i = [], SpeechProbability(shared_model()), 0
    for size in [2, 640, 1022, 3200, 18] * 100:
        pieces += [w.speech_probability for w in detector.push(pcm[i : i + size])]
        i += size
    pieces += [w.speech_probability for w in detector.push(pcm[i:])]
    assert len(whole) == len(pcm) // 2 // 512
    assert np.allclose(pieces, whole, atol=1e-4)
    assert max(whole) > 0.9  # a voice


@pytest.mark.parametrize("encoding", ["linear16", "mulaw"])
@pytest.mark.parametrize("kind", TONAL)
def test_music_and_tones_never_open_an_utterance(kind: str, encoding: str) -> None:
    data, rate = client_audio(to_pcm16(synthesize(kind, 20.0, seed=3)), encoding)
    out = run(data, "silero", encoding, rate)
    assert boundaries(out) == [] and speech_ms(out) == 0


def test_webrtcvad_alone_takes_sustained_music_for_one_endless_utterance() -> None:
    # Why the network is there: the energy gate calls 20 s of chords one utterance.
    out = run(to_pcm16(synthesize("pad", 20.0, seed=3)), "webrtcvad")
    assert speech_ms(out) > 19000 and len(boundaries(out)) == 2


@pytest.mark.parametrize("snr_db", [0, 10])
@pytest.mark.parametrize("kind", ["pad", "arpeggio", "plucked"])
def test_speech_over_music_ends_where_the_speech_does(kind: str, snr_db: int) -> None:
    pcm = read_wav_pcm(SPEECH)[0]
    voice = np.frombuffer(pcm, dtype="<i2") / 32768
    speech_end_ms = boundaries(run(pcm, "silero"))[-1][1]
    mixed = np.concatenate([voice, np.zeros(16000 * 10)])  # the music goes on 10 s after the last word
    level = 20 * np.log10(np.sqrt(np.mean(voice**2))) - snr_db
    mixed += at_level(synthesize(kind, len(mixed) / 16000, seed=4), level)[: len(mixed)]
    found = boundaries(run(to_pcm16(mixed), "silero"))
    assert [started for started, _ in found] == [True, False], found
    # At 0 dB the network hears the music a little longer than the voice (720 ms seen).
    assert -300 <= found[1][1] - speech_end_ms <= 1000, (found, speech_end_ms)


@pytest.mark.parametrize("clip", ["flite_rms_call_me_back.wav", "go_forward.wav", "cards_eight_of_spades.wav", SPEECH])
def test_speech_alone_is_kept(clip: str) -> None:
    pcm = read_wav_pcm(clip)[0]
    alone, gated = run(pcm, "webrtcvad"), run(pcm, "silero")
    assert speech_ms(gated) >= 0.8 * speech_ms(alone)
    assert len(boundaries(gated)) == len(boundaries(alone))


@pytest.mark.parametrize("encoding", ["linear16", "mulaw"])
def test_a_hoarse_voice_the_network_misses_is_kept(encoding: str) -> None:
    # Silero scores this speaker below 0.15 as 8 kHz mu-law; the audio is not tonal, so it stays speech.
    clip = next(c for c in load_corpus(WER_CORPUS) if c.file == "mfa_cold_corpus_a.wav")
    data, rate = client_audio(clip.pcm16k, encoding)
    alone, gated = run(data, "webrtcvad", encoding, rate), run(data, "silero", encoding, rate)
    assert speech_ms(gated) >= 0.9 * speech_ms(alone)
