"""What the audio carries instead of speech (service/audio/nonspeech.py): music's start and end and DTMF
digits, as the pipeline reports them when a client asks, on either speech detector. Seeds 31-32: the
development seeds (1-2) and the docs' validation seeds (7-8) are not these."""

from __future__ import annotations

import numpy as np
import pytest

from bench.nonspeech_audio import KINDS, at_level, dtmf_tone, synthesize, to_pcm16
from bench.wer import WER_CORPUS, client_audio, load_corpus
from service.audio.decode import Encoding
from service.audio.nonspeech import MUSIC_END_MS, MUSIC_START_MS, RUN_BREAK_MS, MusicTracker, NonSpeech, Sound
from service.audio.pipeline import AudioPipeline, EngineChunk
from tests.helpers import read_wav_pcm

MUSIC = ("pad", "arpeggio", "plucked", "hold_with_beeps")
NOISE = ("white_noise", "pink_noise")


def heard(
    pcm16k: bytes, encoding: str = "linear16", detector: str = "webrtcvad", report: bool = True
) -> list[NonSpeech]:
    data, rate = client_audio(pcm16k, encoding) if encoding != "linear16" else (pcm16k, 16000)
    pipeline = AudioPipeline(Encoding(encoding), rate, 2, 800, detector, report)
    step = rate // 10 * (2 if encoding == "linear16" else 1)
    out = [o for i in range(0, len(data), step) for o in pipeline.push(data[i : i + step])]
    return [o for o in out + pipeline.finish() if isinstance(o, NonSpeech)]


def test_music_starts_after_a_second_of_it_and_ends_after_a_second_and_a_half_without() -> None:
    tracker = MusicTracker()
    events = []
    pattern = [(True, False)] * 40 + [(False, True)] * 10 + [(True, False)] * 20 + [(False, False)] * 60
    for k, (music, silent) in enumerate(pattern):  # 32 ms windows
        event = tracker.window(k * 32, 32, music, silent)
        if event is not None:
            events.append((event.sound, event.offset_ms, k * 32 + 32))
    started, ended = events
    assert started[:2] == (Sound.MUSIC_STARTED, 0) and started[2] >= MUSIC_START_MS
    assert ended[:2] == (Sound.MUSIC_ENDED, 70 * 32), "a rest inside the music does not end it"
    assert ended[2] - ended[1] >= MUSIC_END_MS
    assert tracker.finish(10_000) is None


def test_something_else_breaks_a_run_of_music_before_it_starts() -> None:
    tracker = MusicTracker()
    windows = [True] * 20 + [False] * (RUN_BREAK_MS // 32 + 1) + [True] * 20
    events = [e for k, m in enumerate(windows) if (e := tracker.window(k * 32, 32, m, False)) is not None]
    assert [(e.sound, e.offset_ms) for e in events] == [], "two runs of 640 ms: neither a second"
    assert tracker.finish(4000) is None


@pytest.mark.parametrize("encoding", ["linear16", "mulaw"])
@pytest.mark.parametrize("kind", MUSIC)
def test_music_is_one_run_from_its_start_to_its_end(kind: str, encoding: str) -> None:
    music = synthesize(kind, 12.0, seed=31, dbfs=-20)
    audio = np.concatenate([np.zeros(16000), music, np.zeros(16000 * 3)])
    events = [(e.sound, e.offset_ms) for e in heard(to_pcm16(audio), encoding)]
    assert [s for s, _ in events] == [Sound.MUSIC_STARTED, Sound.MUSIC_ENDED]
    (_, start), (_, end) = events
    assert 1000 - 32 <= start <= 2500 and 12_500 <= end <= 13_200  # 32 ms windows


@pytest.mark.parametrize("kind", NOISE)
def test_noise_is_not_music(kind: str) -> None:
    assert heard(to_pcm16(synthesize(kind, 10.0, seed=32, dbfs=-20))) == []


@pytest.mark.parametrize("encoding", ["linear16", "mulaw", "alaw"])
def test_digits_are_reported_once_each_where_their_tone_begins(encoding: str) -> None:
    keys = "5912*#0"
    pieces = [np.zeros(8000)]
    for key in keys:
        pieces += [at_level(dtmf_tone(key, 0.1), -20), np.zeros(1600)]
    digits = [(e.digit, e.offset_ms) for e in heard(to_pcm16(np.concatenate(pieces)), encoding)]
    assert [d for d, _ in digits] == list(keys)
    expected = [500 + 200 * k for k in range(len(keys))]
    assert all(abs(at - want) <= 20 for (_, at), want in zip(digits, expected, strict=True))


def test_speech_is_neither_music_nor_digits_and_nothing_is_reported_unasked() -> None:
    clips = load_corpus(WER_CORPUS)[::4]
    for clip in clips:
        for encoding in ("linear16", "mulaw"):
            assert heard(clip.pcm16k, encoding) == [], clip.file
    pcm = read_wav_pcm("librivox_amiable_woman.wav")[0]
    hold = to_pcm16(synthesize("arpeggio", 6.0, seed=31, dbfs=-20))
    assert heard(pcm + hold, report=False) == []
    assert [e.sound for e in heard(pcm + hold)] == [Sound.MUSIC_STARTED, Sound.MUSIC_ENDED]


def test_reporting_does_not_change_what_the_engine_gets() -> None:
    audio = read_wav_pcm("librivox_amiable_woman.wav")[0] + to_pcm16(synthesize("pad", 4.0, seed=31))

    def chunks(report: bool) -> list[EngineChunk]:
        pipeline = AudioPipeline(Encoding.LINEAR16, 16000, 2, 800, "webrtcvad", report)
        out = pipeline.push(audio) + pipeline.finish()
        return [o for o in out if isinstance(o, EngineChunk)]

    assert chunks(True) == chunks(False)


def test_every_kind_of_the_corpus_is_covered() -> None:
    assert set(MUSIC) | set(NOISE) <= set(KINDS)
