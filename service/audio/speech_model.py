"""Silero VAD v6, the neural speech detector that music and tones do not fool (webrtcvad's energy and
spectrum gate calls sustained music speech).

Runs in the service process: one ONNX Runtime session per process, shared by every stream; each stream
keeps its own recurrent state. The model is the file inside the `faster-whisper` wheel, pinned by sha256
and never downloaded. It takes 512-sample windows of 16 kHz audio, each with the 64 samples before it,
and gives each window a speech probability (~0.1 ms of CPU a window, one thread).
"""

from __future__ import annotations

import hashlib
import importlib.util
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .tonality import band_flatness

MODEL_PACKAGE = "faster-whisper==1.2.1"
MODEL_FILE = "silero_vad_v6.onnx"
MODEL_SHA256 = "4cbf549b8326f60f80f2536d9eefeb450a9abe83365a098031c89719f1be17d2"
WINDOW_SAMPLES = 512  # 32 ms at 16 kHz
CONTEXT_SAMPLES = 64
STATE_SHAPE = (1, 1, 128)


class SpeechModelError(RuntimeError):
    """The model cannot be used; the message names the file and the fix."""


def model_path() -> Path:
    """The file in the installed wheel, found without importing faster-whisper (CTranslate2, PyAV: seconds)."""
    spec = importlib.util.find_spec("faster_whisper")
    if spec is None or spec.origin is None:
        raise SpeechModelError(
            f"the speech detector's model comes with the pip package {MODEL_PACKAGE}, which is not installed: "
            "run `make install`"
        )
    return Path(spec.origin).parent / "assets" / MODEL_FILE


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class SpeechModel:
    """The loaded network; `run` is safe from any thread (ONNX Runtime sessions are)."""

    def __init__(self, path: Path, sha256: str = MODEL_SHA256) -> None:
        if not path.is_file():
            raise SpeechModelError(f"{path} is missing: reinstall {MODEL_PACKAGE} (`make install`)")
        found = _sha256(path)
        if sha256 and found != sha256:
            raise SpeechModelError(
                f"{path} has sha256 {found}, not the pinned {sha256}: reinstall {MODEL_PACKAGE} (`make install`)"
            )
        import onnxruntime  # here, not at import: a service without the detector never pays for it

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1  # per-stream work is tiny: threads would cost more than they save
        options.inter_op_num_threads = 1
        options.log_severity_level = 4
        self._session = onnxruntime.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )

    def run(self, windows: np.ndarray, h: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """windows: (n, CONTEXT_SAMPLES + WINDOW_SAMPLES) float32 → (n probabilities, h, c)."""
        out: list[Any] = self._session.run(None, {"input": windows, "h": h, "c": c})
        return np.asarray(out[0]).reshape(-1), out[1], out[2]


_shared: SpeechModel | None = None
_shared_lock = threading.Lock()


def shared_model() -> SpeechModel:
    """The process's one model, loaded and checked on first use."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = SpeechModel(model_path())
        return _shared


@dataclass(frozen=True)
class Window:
    """What the detector makes of one 32 ms window."""

    speech_probability: float  # Silero's
    flatness: float  # of the telephone band: near 0 for music and tones, nan when silent (tonality.py)


class SpeechProbability:
    """One stream's detector: 16 kHz PCM16 in, a verdict per completed 32 ms window out."""

    def __init__(self, model: SpeechModel) -> None:
        self._model = model
        self._h = np.zeros(STATE_SHAPE, dtype=np.float32)
        self._c = np.zeros(STATE_SHAPE, dtype=np.float32)
        self._context = np.zeros(CONTEXT_SAMPLES, dtype=np.float32)
        self._pending = np.zeros(0, dtype=np.float32)

    def push(self, pcm16: bytes) -> list[Window]:
        """The windows this audio completes, oldest first (one run of the network for all of them)."""
        samples = np.frombuffer(pcm16, dtype="<i2").astype(np.float32) / 32768.0
        data = np.concatenate([self._pending, samples]) if len(self._pending) else samples
        count = len(data) // WINDOW_SAMPLES
        self._pending = data[count * WINDOW_SAMPLES :]
        if not count:
            return []
        windows = data[: count * WINDOW_SAMPLES].reshape(count, WINDOW_SAMPLES)
        contexts = np.concatenate([self._context[None, :], windows[:-1, -CONTEXT_SAMPLES:]])
        self._context = windows[-1, -CONTEXT_SAMPLES:].copy()
        probabilities, self._h, self._c = self._model.run(
            np.ascontiguousarray(np.concatenate([contexts, windows], axis=1)), self._h, self._c
        )
        return [Window(float(p), float(f)) for p, f in zip(probabilities, band_flatness(windows), strict=True)]
