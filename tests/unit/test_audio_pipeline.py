import numpy as np
import pytest

from service.audio.decode import Encoding, InvalidAudio
from service.audio.pipeline import AudioPipeline, EngineChunk
from service.audio.vad import SpeechBoundary
from tests.helpers import silence, voiced


def run(pipeline: AudioPipeline, data: bytes, step: int) -> list[EngineChunk | SpeechBoundary]:
    out: list[EngineChunk | SpeechBoundary] = []
    for i in range(0, len(data), step):
        out += pipeline.push(data[i : i + step])
    return out + pipeline.finish()


def test_speech_events_bracket_the_voiced_part_and_chunks_cover_all_audio() -> None:
    data = silence(1.0) + voiced(1.5) + silence(1.5)
    out = run(AudioPipeline(Encoding.LINEAR16, 16000, 2, silence_ms=600), data, 3200)
    bounds = [o for o in out if isinstance(o, SpeechBoundary)]
    assert [b.started for b in bounds] == [True, False]
    assert 900 <= bounds[0].offset_ms <= 1100
    assert 2400 <= bounds[1].offset_ms <= 2700
    chunks = [o for o in out if isinstance(o, EngineChunk)]
    assert sum(len(c.pcm16) for c in chunks) == len(data)
    assert all(len(c.pcm16) <= 2560 for c in chunks)
    assert any(c.speech for c in chunks) and not chunks[0].speech


@pytest.mark.parametrize("step", [2, 322, 3200, 64000])
def test_chunking_does_not_depend_on_client_message_size(step: int) -> None:
    data = silence(0.5) + voiced(1.0) + silence(1.0)
    ref = run(AudioPipeline(Encoding.LINEAR16, 16000, 2, 600), data, 640)
    assert run(AudioPipeline(Encoding.LINEAR16, 16000, 2, 600), data, step) == ref


def test_resampling_keeps_duration() -> None:
    rate = 44100
    data = np.zeros(rate * 2, dtype="<i2").tobytes()
    chunks = [o for o in run(AudioPipeline(Encoding.LINEAR16, rate, 2, 600), data, 4410) if isinstance(o, EngineChunk)]
    assert abs(sum(len(c.pcm16) for c in chunks) // 2 - 32000) <= 320


def test_odd_linear16_is_rejected() -> None:
    with pytest.raises(InvalidAudio, match="odd"):
        AudioPipeline(Encoding.LINEAR16, 16000, 2, 600).push(b"\0\0\0")


def test_g711_accepts_any_size() -> None:
    p = AudioPipeline(Encoding.MULAW, 8000, 2, 600)
    for n in (1, 3, 7, 161):
        p.push(b"\xff" * n)
    assert p.samples_in == 172


@pytest.mark.parametrize("rate", [8000, 44100])
def test_resampled_audio_does_not_depend_on_client_message_size(rate: int) -> None:
    samples = (np.random.default_rng(0).standard_normal(rate * 2) * 3000).astype("<i2").tobytes()
    ref = run(AudioPipeline(Encoding.LINEAR16, rate, 2, 600), samples, 2 * rate // 10)
    for step in (2, 3000, rate // 3 * 2):
        assert run(AudioPipeline(Encoding.LINEAR16, rate, 2, 600), samples, step) == ref


@pytest.mark.parametrize("step", [2, 322, 640, 3200])
def test_linear16_at_16khz_taken_as_is_gives_what_the_numpy_path_gives(step: int) -> None:
    data = silence(0.5) + voiced(1.0) + silence(1.0)
    general = AudioPipeline(Encoding.LINEAR16, 16000, 2, 600)
    general._as_is = False  # decode → resampler pass-through → bytes, as every other format goes
    fast = AudioPipeline(Encoding.LINEAR16, 16000, 2, 600)
    assert fast._as_is
    assert run(fast, data, step) == run(general, data, step)
    assert fast.samples_in == general.samples_in == len(data) // 2
