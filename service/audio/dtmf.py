"""In-band DTMF: which key a 20 ms frame of 16 kHz audio carries, by the Goertzel power of the eight tones.

Runs in the service process, per stream. G.711 calls arrive here already decoded and resampled, so 8 kHz
and 16 kHz clients are judged alike. A key is two tones, one row and one column (ITU-T Q.23), that hold
nearly all of the frame's energy, within a twist of each other (Q.24: the detectors in use allow about
±8 dB), with every other DTMF tone far below and no second harmonic of note (a voice has harmonics; a
keypad's sine pair has none). A digit is reported once it has lasted 40 ms, and again only after 40 ms
without it (Q.24's shortest tone and pause).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SAMPLE_RATE_HZ = 16000
FRAME_MS = 20
ROWS_HZ = (697.0, 770.0, 852.0, 941.0)
COLUMNS_HZ = (1209.0, 1336.0, 1477.0, 1633.0)
KEYS = ("123A", "456B", "789C", "*0#D")

# Thresholds: the pair's share of the frame's energy, the twist, and how far the next tone of each group
# and the second harmonics must stay below the pair. A pure pair in quiet scores a share near 1.
MIN_PAIR_SHARE = 0.7
MAX_TWIST_DB = 8.0
MIN_OTHER_TONE_GAP_DB = 10.0
MIN_HARMONIC_GAP_DB = 20.0
MIN_FRAME_RMS = 10 ** (-50 / 20)
FRAMES_TO_REPORT = 2  # 40 ms
FRAMES_TO_RELEASE = 2


def _basis(freqs: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Hann-windowed cosines and sines of one frame, scaled so that a sine of amplitude A gets power A²/4."""
    n = SAMPLE_RATE_HZ * FRAME_MS // 1000
    window = np.hanning(n)
    phases = 2 * np.pi * np.outer(np.asarray(freqs), np.arange(n) / SAMPLE_RATE_HZ)
    return np.cos(phases) * window / window.sum(), np.sin(phases) * window / window.sum()


# Made once: the eight tones, and the columns' second harmonics.
_TONES = _basis(ROWS_HZ + COLUMNS_HZ)
_COLUMN_HARMONICS = _basis(tuple(2 * f for f in COLUMNS_HZ))


def _power(frame: np.ndarray, basis: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The DFT power at each of the basis' frequencies (the Goertzel result, as two dot products)."""
    cosines, sines = basis
    power: np.ndarray = (cosines @ frame) ** 2 + (sines @ frame) ** 2
    return power


def _db(ratio: float) -> float:
    return 10 * float(np.log10(max(ratio, 1e-12)))


def key_in(frame: np.ndarray) -> str | None:
    """The key one 20 ms frame of float samples carries, or None."""
    mean_square = float(np.mean(frame**2))
    if mean_square < MIN_FRAME_RMS**2:
        return None
    tones = _power(frame, _TONES)
    rows, columns = tones[:4], tones[4:]
    r, c = int(np.argmax(rows)), int(np.argmax(columns))
    row, column = rows[r], columns[c]
    # A sine of amplitude A has mean square A²/2 and (above) power A²/4: the pair's share of the energy.
    if 2 * (row + column) < MIN_PAIR_SHARE * mean_square:
        return None
    if abs(_db(row / column)) > MAX_TWIST_DB:
        return None
    if (
        _db(row / np.sort(rows)[-2]) < MIN_OTHER_TONE_GAP_DB
        or _db(column / np.sort(columns)[-2]) < MIN_OTHER_TONE_GAP_DB
    ):
        return None
    # The column's second harmonic only: a row's (1394-1882 Hz) lies within a 20 ms frame's resolution of
    # the columns, so a keypad's own column tone would fill it.
    if _db(column / _power(frame, _COLUMN_HARMONICS)[c]) < MIN_HARMONIC_GAP_DB:
        return None
    return KEYS[r][c]


@dataclass(frozen=True)
class Digit:
    key: str
    offset_ms: int  # where its tone began, in the stream's time


class DtmfDetector:
    """One stream's digits, from its 20 ms frames in order."""

    def __init__(self) -> None:
        self._frame_index = 0
        self._candidate: str | None = None
        self._run = 0  # frames the candidate has lasted
        self._reported: str | None = None  # the digit being held, reported already
        self._silent_run = 0
        self.in_tone = False  # the last frame was part of a digit (the speech gate asks)

    def frame(self, pcm16: bytes) -> Digit | None:
        samples = np.frombuffer(pcm16, dtype="<i2").astype(np.float64) / 32768.0
        key = key_in(samples)
        index = self._frame_index
        self._frame_index += 1
        self.in_tone = key is not None
        if key is None:
            self._silent_run += 1
            self._candidate, self._run = None, 0
            if self._silent_run >= FRAMES_TO_RELEASE:
                self._reported = None
            return None
        self._silent_run = 0
        if key != self._candidate:
            self._candidate, self._run = key, 0
        self._run += 1
        if self._run == FRAMES_TO_REPORT and key != self._reported:
            self._reported = key
            return Digit(key, (index - FRAMES_TO_REPORT + 1) * FRAME_MS)
        return None
