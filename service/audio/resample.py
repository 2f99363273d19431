"""Streaming resampling to the engine rate with libsoxr (continuous across chunks)."""

from __future__ import annotations

import numpy as np
import soxr

ENGINE_RATE_HZ = 16000


class StreamResampler:
    def __init__(self, input_rate_hz: int) -> None:
        self._stream = (
            None if input_rate_hz == ENGINE_RATE_HZ
            else soxr.ResampleStream(input_rate_hz, ENGINE_RATE_HZ, 1, dtype="int16", quality="HQ")
        )

    def process(self, samples: np.ndarray) -> np.ndarray:
        if self._stream is None:
            return samples
        return self._stream.resample_chunk(samples, last=False)

    def finish(self) -> np.ndarray:
        if self._stream is None:
            return np.zeros(0, dtype=np.int16)
        return self._stream.resample_chunk(np.zeros(0, dtype=np.int16), last=True)
