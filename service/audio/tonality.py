"""How tonal a 32 ms window is: the spectral flatness of its telephone band (125-3400 Hz).

Music, ringback, DTMF and hum are a few steady partials: a flatness near 0 (0.004-0.15 measured). Speech
is formants over breath and noise, and stays above about 0.35 even where a hoarse voice at 8 kHz leaves
Silero unsure (0.74). So "the network hears no speech and the window is tonal" tells music from a voice
the network misses. The band is the one every call carries, so 8 kHz and 16 kHz clients are judged alike.
"""

from __future__ import annotations

import functools

import numpy as np

SAMPLE_RATE_HZ = 16000
BAND_HZ = (125.0, 3400.0)
SILENT_RMS = 10 ** (-60 / 20)  # a window quieter than -60 dBFS has no tonality (nan): a gap, not a tone


@functools.cache
def _hann(size: int) -> np.ndarray:
    return np.hanning(size)


def band_flatness(windows: np.ndarray) -> np.ndarray:
    """(n, samples) float windows → n flatnesses in [0, 1]: the geometric over the arithmetic mean of the
    band's magnitude spectrum (Hann window); nan for a silent window."""
    size = windows.shape[1]
    spectrum = np.abs(np.fft.rfft(windows * _hann(size), axis=1))
    low, high = (int(f * size / SAMPLE_RATE_HZ) for f in BAND_HZ)
    band = spectrum[:, low : high + 1] + 1e-9
    flatness: np.ndarray = np.exp(np.mean(np.log(band), axis=1)) / np.mean(band, axis=1)
    flatness[np.sqrt(np.mean(windows**2, axis=1)) < SILENT_RMS] = np.nan
    return flatness
