"""Real speech to send: the 16 kHz mono fixtures as one loop, cut into paced frames."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

SAMPLE_RATE = 16000
AUDIO_DIR = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "audio"


def load_loop(audio_dir: Path = AUDIO_DIR) -> np.ndarray:
    """Every 16 kHz mono PCM16 WAV in `audio_dir`, concatenated (the fixtures: ~17 s of speech)."""
    parts: list[np.ndarray] = []
    for path in sorted(audio_dir.glob("*.wav")) if audio_dir.is_dir() else ():
        with wave.open(str(path)) as w:
            if w.getframerate() != SAMPLE_RATE or w.getnchannels() != 1 or w.getsampwidth() != 2:
                continue
            parts.append(np.frombuffer(w.readframes(w.getnframes()), dtype="<i2"))
    if not parts:
        hint = "" if audio_dir != AUDIO_DIR else (
            " (the repository's fixtures, absent from an installed wheel: pass --audio-dir DIR with "
            "16 kHz mono PCM16 WAV files of speech)")
        raise SystemExit(f"no 16 kHz mono PCM16 WAV files in {audio_dir}{hint}")
    return np.concatenate(parts)


def frames(loop: np.ndarray, offset_samples: int, duration_s: float, frame_ms: int) -> list[bytes]:
    """`duration_s` of the loop from `offset_samples` (wrapping), as `frame_ms` LINEAR16 frames."""
    per = SAMPLE_RATE * frame_ms // 1000
    n = int(duration_s * 1000) // frame_ms
    idx = (offset_samples + np.arange(n * per)) % len(loop)
    pcm = loop[idx].astype("<i2").tobytes()
    step = per * 2
    return [pcm[i * step:(i + 1) * step] for i in range(n)]
