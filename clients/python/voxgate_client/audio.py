"""Reading audio files and turning samples into wire bytes.

Everything is normalised to mono int16 at the file's own rate: resampling is
the server's job, so the client never changes the rate.
"""

from __future__ import annotations

import io
import wave
from collections.abc import Iterator
from dataclasses import dataclass
from os import PathLike
from typing import BinaryIO

import numpy as np
import numpy.typing as npt

from . import g711
from .encodings import Encoding, bytes_per_sample

__all__ = [
    "Audio",
    "chunk_bytes",
    "chunks",
    "decode",
    "encode",
    "read_raw",
    "read_wav",
    "read_wav_channels",
]

Source = str | PathLike[str] | BinaryIO | bytes


@dataclass(frozen=True)
class Audio:
    """Mono int16 samples and their sample rate."""

    samples: npt.NDArray[np.int16]
    sample_rate: int

    @property
    def duration_s(self) -> float:
        return len(self.samples) / self.sample_rate


def _read_all(source: Source) -> bytes:
    if isinstance(source, bytes):
        return source
    if isinstance(source, (str, PathLike)):
        with open(source, "rb") as f:
            return f.read()
    return source.read()


def _pcm_to_float(frames: bytes, width: int) -> npt.NDArray[np.float64]:
    """PCM frames of `width` bytes to float64 on the int16 scale."""
    raw = np.frombuffer(frames, dtype=np.uint8)
    if width == 1:  # 8-bit WAV is unsigned
        return (raw.astype(np.float64) - 128.0) * 256.0
    if width == 2:
        return np.frombuffer(frames, dtype="<i2").astype(np.float64)
    if width == 3:
        # Widen each 3-byte sample to int32 by putting it in the top bytes.
        padded = np.zeros((len(raw) // 3, 4), dtype=np.uint8)
        padded[:, 1:] = raw.reshape(-1, 3)
        return padded.view("<i4").reshape(-1).astype(np.float64) / 65536.0
    if width == 4:
        return np.frombuffer(frames, dtype="<i4").astype(np.float64) / 65536.0
    raise ValueError(f"unsupported WAV sample width: {width * 8} bits")


def _to_int16(values: npt.NDArray[np.float64]) -> npt.NDArray[np.int16]:
    return np.clip(np.rint(values), -32768, 32767).astype(np.int16)


def read_wav(source: Source) -> Audio:
    """Read a PCM WAV (8/16/24/32-bit, any rate, any channel count) as mono int16.

    Channels are averaged; samples wider than 16 bits are rounded to 16.
    """
    frames, rate = _wav_frames(source)
    return Audio(_to_int16(frames.mean(axis=1)), rate)


def read_wav_channels(source: Source) -> tuple[npt.NDArray[np.int16], int]:
    """Read a PCM WAV keeping its channels: int16 samples shaped (frames, channels), and the rate.

    `samples.reshape(-1)` is the interleaved audio a multichannel stream sends.
    """
    frames, rate = _wav_frames(source)
    return _to_int16(frames), rate


def _wav_frames(source: Source) -> tuple[npt.NDArray[np.float64], int]:
    data = _read_all(source)
    try:
        with wave.open(io.BytesIO(data), "rb") as w:
            channels, width, rate = w.getnchannels(), w.getsampwidth(), w.getframerate()
            frames = w.readframes(w.getnframes())
    except (wave.Error, EOFError) as e:
        raise ValueError(f"not a readable PCM WAV file: {e}") from e
    usable = len(frames) - len(frames) % (width * channels)  # drop a truncated last frame
    return _pcm_to_float(frames[:usable], width).reshape(-1, channels), rate


def decode(data: bytes, encoding: Encoding) -> npt.NDArray[np.int16]:
    """Wire bytes in `encoding` to int16 samples."""
    if encoding == "linear16":
        if len(data) % 2:
            raise ValueError("LINEAR16 audio must have an even number of bytes")
        return np.frombuffer(data, dtype="<i2").astype(np.int16)
    if encoding == "mulaw":
        return g711.decode_mulaw(data)
    return g711.decode_alaw(data)


def read_raw(source: Source, sample_rate: int, encoding: Encoding) -> Audio:
    """Read headerless mono audio: LINEAR16 (little-endian), mu-law or A-law bytes."""
    if sample_rate <= 0:
        raise ValueError("sample_rate must be positive")
    return Audio(decode(_read_all(source), encoding), sample_rate)


def encode(samples: npt.NDArray[np.int16], encoding: Encoding) -> bytes:
    """int16 samples to wire bytes in `encoding`."""
    if encoding == "linear16":
        return np.asarray(samples, dtype="<i2").tobytes()
    if encoding == "mulaw":
        return g711.encode_mulaw(samples)
    return g711.encode_alaw(samples)


def chunk_bytes(encoding: Encoding, sample_rate: int, chunk_ms: int) -> int:
    """Bytes in `chunk_ms` of audio, rounded to whole samples (at least one)."""
    samples = max(1, sample_rate * chunk_ms // 1000)
    return samples * bytes_per_sample(encoding)


def chunks(data: bytes, bytes_per_chunk: int) -> Iterator[bytes]:
    """Split `data` into pieces of `bytes_per_chunk` (the last may be shorter)."""
    if bytes_per_chunk <= 0:
        raise ValueError("bytes_per_chunk must be positive")
    view = memoryview(data)
    for start in range(0, len(data), bytes_per_chunk):
        yield bytes(view[start : start + bytes_per_chunk])
