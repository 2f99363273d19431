"""In-band DTMF: every key at every level and telephony encoding, Q.24's timing, and no digit from speech,
music or noise."""

from __future__ import annotations

import numpy as np
import pytest

from bench.nonspeech_audio import KINDS, at_level, dtmf_tone, synthesize, to_pcm16
from bench.wer import WER_CORPUS, client_audio, engine_chunks, load_corpus
from service.audio.dtmf import COLUMNS_HZ, ROWS_HZ, Digit, DtmfDetector

KEYS = "123456789*0#ABCD"


def digits(data: bytes, encoding: str = "linear16") -> list[Digit]:
    """What the detector reports for client bytes, after the service's decode and resampling."""
    pcm = b"".join(c.pcm16 for c in engine_chunks(data, encoding)) if encoding != "linear16" else data
    detector = DtmfDetector()
    found = (detector.frame(pcm[i : i + 640]) for i in range(0, len(pcm) - 639, 640))
    return [d for d in found if d is not None]


def keyed(keys: str, tone_s: float = 0.1, gap_s: float = 0.1) -> np.ndarray:
    return np.concatenate([np.concatenate([dtmf_tone(k, tone_s), np.zeros(int(16000 * gap_s))]) for k in keys])


@pytest.mark.parametrize("dbfs", [-40, -20, -3])
@pytest.mark.parametrize("encoding", ["linear16", "mulaw", "alaw"])
def test_every_key_is_heard_once_where_it_starts(encoding: str, dbfs: int) -> None:
    data, _ = client_audio(to_pcm16(at_level(keyed(KEYS), dbfs)), encoding)
    found = digits(data, encoding)
    assert "".join(d.key for d in found) == KEYS
    assert all(abs(d.offset_ms - 200 * i) <= 20 for i, d in enumerate(found)), found


def test_a_held_key_is_one_digit_and_a_tone_shorter_than_40_ms_none() -> None:
    assert [d.key for d in digits(to_pcm16(keyed("5", tone_s=1.5)))] == ["5"]
    assert digits(to_pcm16(keyed("5", tone_s=0.03))) == []


def test_the_same_key_twice_is_two_digits_after_a_pause() -> None:
    assert [d.key for d in digits(to_pcm16(keyed("77", gap_s=0.06)))] == ["7", "7"]


def test_tones_too_far_apart_in_level_are_not_a_key() -> None:
    t = np.arange(1600) / 16000
    twisted = 0.5 * np.sin(2 * np.pi * ROWS_HZ[0] * t) + 0.5 * 10 ** (-12 / 20) * np.sin(2 * np.pi * COLUMNS_HZ[0] * t)
    assert digits(to_pcm16(twisted)) == []


@pytest.mark.parametrize("encoding", ["linear16", "mulaw"])
def test_speech_never_keys_a_digit(encoding: str) -> None:
    clips = load_corpus(WER_CORPUS)
    assert len(clips) >= 20
    for clip in clips:
        data, _ = client_audio(clip.pcm16k, encoding)
        assert digits(data, encoding) == [], clip.file


@pytest.mark.parametrize("kind", sorted(set(KINDS) - {"dtmf_menu"}))
def test_music_tones_and_noise_never_key_a_digit(kind: str) -> None:
    assert digits(to_pcm16(synthesize(kind, 20.0, seed=11))) == []
