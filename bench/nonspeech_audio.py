"""Non-speech audio a call carries, synthesised: music in three styles, hold music with beeps, ringback, DTMF,
noise and mains hum. Deterministic for a seed, 16 kHz float in [-1, 1], so a test and the corpus script
(issue 45) make the same samples on any machine.

Runs in the test process and in scripts; nothing here is loaded by the service or the sidecar.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

RATE = 16000
# Row and column tones of each DTMF key (ITU-T Q.23).
DTMF_ROWS = (697, 770, 852, 941)
DTMF_COLUMNS = (1209, 1336, 1477, 1633)
DTMF_KEYS = ("123A", "456B", "789C", "*0#D")


def _time(seconds: float) -> np.ndarray:
    return np.arange(int(RATE * seconds)) / RATE


def _reverb(x: np.ndarray, rng: np.random.Generator, decay_s: float) -> np.ndarray:
    """A room: x convolved with exponentially decaying noise (an impulse response's late tail)."""
    n = int(RATE * decay_s)
    impulse = rng.standard_normal(n) * np.exp(-np.arange(n) / RATE * 5 / decay_s)
    impulse[0] = 4.0  # the direct sound
    wet = np.convolve(x, impulse)[: len(x)]
    return wet / (np.abs(wet).max() or 1.0)


def _fit(x: np.ndarray, seconds: float) -> np.ndarray:
    """Loop or cut `x` to exactly `seconds`."""
    n = int(RATE * seconds)
    return np.tile(x, -(-n // len(x)))[:n]


def pad(seconds: float, rng: np.random.Generator) -> np.ndarray:
    """Sustained chords with reverb: the "You You You" music of the issue."""
    chords = ((220.0, 277.2, 329.6), (196.0, 246.9, 293.7), (174.6, 220.0, 261.6), (164.8, 207.7, 246.9))
    t = _time(2.0)
    bars = [sum(np.sin(2 * np.pi * f * t) + 0.3 * np.sin(4 * np.pi * f * t) for f in chord) for chord in chords]
    return _fit(_reverb(np.concatenate(bars), rng, 1.2), seconds)


def _note(freq: float, seconds: float) -> np.ndarray:
    t = _time(seconds)
    tone = sum(np.sin(2 * np.pi * freq * k * t) / k**1.5 for k in range(1, 6))
    return tone * np.minimum(1.0, t / 0.02) * np.exp(-t * 2)


def arpeggio(seconds: float, rng: np.random.Generator) -> np.ndarray:
    """Broken chords of short harmonic notes with reverb."""
    notes = (261.6, 329.6, 392.0, 523.3, 392.0, 329.6, 220.0, 261.6, 329.6, 440.0, 329.6, 261.6)
    return _fit(_reverb(np.concatenate([_note(f, 0.15) for f in notes]), rng, 0.6), seconds)


def plucked(seconds: float, rng: np.random.Generator) -> np.ndarray:
    """A plucked-string timbre (Karplus-Strong): what a recorded guitar or harp is like."""
    out = []
    for freq in (196.0, 246.9, 293.7, 392.0, 293.7, 246.9, 220.0, 329.6):
        period = int(RATE / freq)
        string = rng.uniform(-1, 1, period)
        note = np.empty(int(RATE * 0.3))
        for i in range(len(note)):  # the string's averaging loop: a few ms of Python per note
            j = i % period
            note[i] = string[j]
            string[j] = 0.996 * 0.5 * (string[j] + string[(j + 1) % period])
        out.append(note)
    return _fit(np.concatenate(out), seconds)


def hold_with_beeps(seconds: float, rng: np.random.Generator) -> np.ndarray:
    """Hold music with a 1 kHz beep every 5 s ("your call is important to us" without the voice)."""
    music = arpeggio(seconds, rng) * 0.5
    beep = np.sin(2 * np.pi * 1000 * _time(0.25))
    for start in range(int(RATE * 2), len(music) - len(beep), RATE * 5):
        music[start : start + len(beep)] += beep
    return music


def ringback(seconds: float, rng: np.random.Generator) -> np.ndarray:
    """North-American ringback: 440 + 480 Hz, 2 s on, 4 s off."""
    on = 0.5 * (np.sin(2 * np.pi * 440 * _time(2.0)) + np.sin(2 * np.pi * 480 * _time(2.0)))
    return _fit(np.concatenate([on, np.zeros(RATE * 4)]), seconds)


def dtmf_tone(key: str, seconds: float = 0.1) -> np.ndarray:
    row = next(i for i, keys in enumerate(DTMF_KEYS) if key in keys)
    column = DTMF_KEYS[row].index(key)
    t = _time(seconds)
    return 0.5 * (np.sin(2 * np.pi * DTMF_ROWS[row] * t) + np.sin(2 * np.pi * DTMF_COLUMNS[column] * t))


def dtmf_menu(seconds: float, rng: np.random.Generator) -> np.ndarray:
    """Digits keyed into a menu: 100 ms tones, 100 ms gaps, a pause between numbers."""
    pieces = []
    while sum(len(p) for p in pieces) < RATE * seconds:
        for key in rng.choice(list("0123456789*#"), size=int(rng.integers(1, 6))):
            pieces += [dtmf_tone(str(key)), np.zeros(RATE // 10)]
        pieces.append(np.zeros(RATE))
    return _fit(np.concatenate(pieces), seconds)


def white_noise(seconds: float, rng: np.random.Generator) -> np.ndarray:
    return rng.standard_normal(int(RATE * seconds))


def pink_noise(seconds: float, rng: np.random.Generator) -> np.ndarray:
    """1/f noise: white noise shaped in the frequency domain."""
    n = int(RATE * seconds)
    spectrum = np.fft.rfft(rng.standard_normal(n))
    spectrum[1:] /= np.sqrt(np.arange(1, len(spectrum)))
    return np.fft.irfft(spectrum, n)


def hum(seconds: float, rng: np.random.Generator) -> np.ndarray:
    """50 Hz mains hum and its odd harmonics, with a little noise."""
    t = _time(seconds)
    tone = sum(np.sin(2 * np.pi * 50 * k * t) / k for k in (1, 3, 5, 7))
    return tone + 0.01 * rng.standard_normal(len(t))


KINDS: dict[str, Callable[[float, np.random.Generator], np.ndarray]] = {
    "pad": pad,
    "arpeggio": arpeggio,
    "plucked": plucked,
    "hold_with_beeps": hold_with_beeps,
    "ringback": ringback,
    "dtmf_menu": dtmf_menu,
    "white_noise": white_noise,
    "pink_noise": pink_noise,
    "hum": hum,
}


def at_level(x: np.ndarray, dbfs: float) -> np.ndarray:
    """`x` scaled to an RMS of `dbfs` (0 dBFS: a full-scale square wave's RMS)."""
    rms = float(np.sqrt(np.mean(x**2))) or 1.0
    return x / rms * 10 ** (dbfs / 20)


def synthesize(kind: str, seconds: float, seed: int = 0, dbfs: float = -20.0) -> np.ndarray:
    return at_level(KINDS[kind](seconds, np.random.default_rng(seed)), dbfs)


def to_pcm16(x: np.ndarray) -> bytes:
    return (np.clip(x, -1.0, 1.0) * 32767).astype("<i2").tobytes()
