"""Real speech to send: the 16 kHz mono clips shipped with the package as one loop, cut into paced frames."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

from engine_api.audio import BYTES_PER_MS, SAMPLE_RATE_HZ

SAMPLE_RATE = SAMPLE_RATE_HZ  # the clips' rate, sent as LINEAR16: what the engine takes, so nothing resamples
# Package data (pyproject: [tool.setuptools.package-data]), so an installed wheel has them too; the repository's
# tests/fixtures/audio/*.wav are links to these files.
AUDIO_DIR = Path(__file__).resolve().parent / "clips"
LONG_CLIP = "librivox_amiable_woman.wav"  # the longest (5.95 s), one sentence of read speech


def read_clip(path: Path) -> np.ndarray | None:
    """A 16 kHz mono PCM16 WAV's samples; None for a file in another format."""
    with wave.open(str(path)) as w:
        if w.getframerate() != SAMPLE_RATE or w.getnchannels() != 1 or w.getsampwidth() != 2:
            return None
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")


def load_loop(audio_dir: Path = AUDIO_DIR) -> np.ndarray:
    """Every 16 kHz mono PCM16 WAV in `audio_dir`, concatenated (the shipped clips: ~17 s of speech)."""
    paths = sorted(audio_dir.glob("*.wav")) if audio_dir.is_dir() else []
    parts = [x for x in map(read_clip, paths) if x is not None]
    if not parts:
        hint = "" if audio_dir != AUDIO_DIR else " (the clips shipped with voxgate: is the package complete?)"
        raise SystemExit(f"no 16 kHz mono PCM16 WAV files in {audio_dir}{hint}")
    return np.concatenate(parts)


def frames(loop: np.ndarray, offset_samples: int, duration_s: float, frame_ms: int) -> list[bytes]:
    """`duration_s` of the loop from `offset_samples` (wrapping), as `frame_ms` LINEAR16 frames."""
    per = SAMPLE_RATE * frame_ms // 1000
    n = int(duration_s * 1000) // frame_ms
    idx = (offset_samples + np.arange(n * per)) % len(loop)
    pcm = loop[idx].astype("<i2").tobytes()
    step = per * 2
    return [pcm[i * step : (i + 1) * step] for i in range(n)]


def speech_with_pauses(seconds: float, seed: int = 0, clip: Path = AUDIO_DIR / LONG_CLIP) -> bytes:
    """Real speech with pauses of varied length, cut to `seconds`: the clip, then 300 + 170 x (k mod 7) ms of
    silence, k counting up from `seed`, again and again (PCM16 bytes)."""
    samples = read_clip(clip)
    if samples is None:
        raise SystemExit(f"{clip}: expected 16 kHz mono PCM16")
    pcm = samples.astype("<i2").tobytes()
    per_s = 1000 * BYTES_PER_MS
    out = bytearray()
    k = seed
    while len(out) < seconds * per_s:
        out += pcm + bytes(BYTES_PER_MS * (300 + 170 * (k % 7)))
        k += 1
    return bytes(out[: int(seconds * per_s) // 2 * 2])
