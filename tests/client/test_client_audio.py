"""WAV/raw reading, downmixing and wire encoding."""

import io
import wave

import numpy as np
import pytest

from voxgate_client import audio, g711


def write_wav(path, frames: bytes, *, rate: int, channels: int, width: int) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(frames)


def test_stereo_44k1_16bit_is_averaged_to_mono(tmp_path):
    rng = np.random.default_rng(1)
    stereo = rng.integers(-32768, 32768, size=(4410, 2)).astype("<i2")
    stereo[0] = [32767, 32767]
    stereo[1] = [-32768, -32768]
    stereo[2] = [1, 2]  # 1.5 rounds half to even -> 2
    path = tmp_path / "stereo.wav"
    write_wav(path, stereo.tobytes(), rate=44100, channels=2, width=2)

    got = audio.read_wav(path)

    assert got.sample_rate == 44100
    assert got.samples.dtype == np.int16
    expected = np.rint(stereo.astype(np.float64).mean(axis=1)).astype(np.int16)
    np.testing.assert_array_equal(got.samples, expected)
    assert got.samples[:3].tolist() == [32767, -32768, 2]
    assert got.duration_s == pytest.approx(0.1)


def test_mono_16bit_is_unchanged_and_file_objects_work(tmp_path):
    mono = np.arange(-800, 800, dtype="<i2")
    path = tmp_path / "mono.wav"
    write_wav(path, mono.tobytes(), rate=8000, channels=1, width=2)
    with open(path, "rb") as f:
        got = audio.read_wav(f)
    np.testing.assert_array_equal(got.samples, mono)
    np.testing.assert_array_equal(audio.read_wav(path.read_bytes()).samples, mono)
    np.testing.assert_array_equal(audio.read_wav(str(path)).samples, mono)


def test_8bit_unsigned_is_scaled_to_int16(tmp_path):
    u8 = np.array([0, 64, 128, 192, 255], dtype=np.uint8)
    path = tmp_path / "u8.wav"
    write_wav(path, u8.tobytes(), rate=11025, channels=1, width=1)
    got = audio.read_wav(path)
    assert got.sample_rate == 11025
    assert got.samples.tolist() == [-32768, -16384, 0, 16384, 32512]


def test_24bit_is_rounded_to_16_and_downmixed(tmp_path):
    left = np.array([0x7FFFFF, -0x800000, 0x000180, -0x000180, 0x123456], dtype=np.int32)
    right = np.array([0x7FFFFF, -0x800000, 0x000080, 0, 0x123456], dtype=np.int32)
    inter = np.stack([left, right], axis=1).reshape(-1)
    frames = b"".join(int(v).to_bytes(3, "little", signed=True) for v in inter)
    path = tmp_path / "s24.wav"
    write_wav(path, frames, rate=48000, channels=2, width=3)

    got = audio.read_wav(path)

    expected = np.clip(np.rint((left + right) / 2 / 256), -32768, 32767)
    np.testing.assert_array_equal(got.samples, expected.astype(np.int16))
    assert got.samples.tolist()[:2] == [32767, -32768]


def test_32bit_and_three_channels(tmp_path):
    chans = np.array([[1 << 30, -(1 << 30), 3 << 16]], dtype="<i4")
    path = tmp_path / "s32.wav"
    write_wav(path, chans.tobytes(), rate=16000, channels=3, width=4)
    got = audio.read_wav(path)
    assert got.samples.tolist() == [1]  # (16384 - 16384 + 3) / 3


def test_non_wav_is_a_value_error():
    with pytest.raises(ValueError, match="WAV"):
        audio.read_wav(io.BytesIO(b"not a wav file at all"))


@pytest.mark.parametrize("encoding", ["linear16", "mulaw", "alaw"])
def test_encode_then_read_raw(encoding):
    samples = np.array([0, 1000, -1000, 32767, -32768], dtype=np.int16)
    data = audio.encode(samples, encoding)
    assert len(data) == len(samples) * (2 if encoding == "linear16" else 1)
    got = audio.read_raw(io.BytesIO(data), 8000, encoding)
    assert got.sample_rate == 8000
    if encoding == "linear16":
        assert data == samples.astype("<i2").tobytes()
        np.testing.assert_array_equal(got.samples, samples)
    else:
        decode = g711.decode_mulaw if encoding == "mulaw" else g711.decode_alaw
        np.testing.assert_array_equal(got.samples, decode(data))


def test_read_raw_rejects_odd_linear16_and_bad_rate():
    with pytest.raises(ValueError, match="even"):
        audio.read_raw(b"\x00\x01\x02", 8000, "linear16")
    with pytest.raises(ValueError):
        audio.read_raw(b"", 0, "mulaw")


def test_chunks_and_chunk_bytes():
    assert list(audio.chunks(b"abcdefg", 3)) == [b"abc", b"def", b"g"]
    assert list(audio.chunks(b"", 3)) == []
    assert audio.chunk_bytes("linear16", 16000, 100) == 3200
    assert audio.chunk_bytes("mulaw", 8000, 20) == 160
    assert audio.chunk_bytes("linear16", 8000, 0) == 2  # never empty
    with pytest.raises(ValueError):
        list(audio.chunks(b"abc", 0))
