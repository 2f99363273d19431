"""Streaming resampling to the engine rate with libsoxr (continuous across chunks).

Same audio must give the engine the same samples, whatever message sizes the
client chose: libsoxr's int16 path dithers (random ±2 LSB), so resampling runs
in float32, and input is fed in fixed 20 ms blocks.
"""

from __future__ import annotations

import numpy as np
import soxr

from engine_api.audio import SAMPLE_RATE_HZ as ENGINE_RATE_HZ

BLOCK_MS = 20


class StreamResampler:
    def __init__(self, input_rate_hz: int) -> None:
        self._block = input_rate_hz * BLOCK_MS // 1000
        self._pending = np.zeros(0, dtype=np.int16)
        self._stream = (
            None
            if input_rate_hz == ENGINE_RATE_HZ
            else soxr.ResampleStream(input_rate_hz, ENGINE_RATE_HZ, 1, dtype="float32", quality="HQ")
        )

    def process(self, samples: np.ndarray) -> np.ndarray:
        if self._stream is None:
            return samples
        data = np.concatenate([self._pending, samples]) if len(self._pending) else samples
        whole = len(data) - len(data) % self._block
        self._pending = data[whole:]
        if not whole:
            return np.zeros(0, dtype=np.int16)
        floats = data[:whole].astype(np.float32)
        blocks = [self._stream.resample_chunk(floats[i : i + self._block]) for i in range(0, whole, self._block)]
        return _to_int16(np.concatenate(blocks))

    def finish(self) -> np.ndarray:
        if self._stream is None:
            return np.zeros(0, dtype=np.int16)
        tail = self._stream.resample_chunk(self._pending.astype(np.float32), last=True)
        self._pending = np.zeros(0, dtype=np.int16)
        return _to_int16(tail)


def _to_int16(samples: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(samples), -32768, 32767).astype(np.int16)
