"""webrtcvad over 20 ms frames: speech start/end events and silence endpoints.

Speech starts when most of a short window is voiced (one voiced click is not
speech); it ends after `silence_ms` of unvoiced audio, which is also the
endpoint that closes an utterance.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import webrtcvad

from engine_api.audio import BYTES_PER_MS, SAMPLE_RATE_HZ

FRAME_MS = 20
FRAME_BYTES = BYTES_PER_MS * FRAME_MS
START_WINDOW_FRAMES = 10
START_VOICED_FRAMES = 6


@dataclass(frozen=True)
class SpeechBoundary:
    started: bool  # True: speech started; False: speech ended (an endpoint)
    offset_ms: int


class VoiceActivity:
    def __init__(self, aggressiveness: int, silence_ms: int) -> None:
        self._vad = webrtcvad.Vad(aggressiveness)
        self._silence_frames = max(1, silence_ms // FRAME_MS)
        self._window: deque[tuple[int, bool]] = deque(maxlen=START_WINDOW_FRAMES)
        self._frame_index = 0
        self._unvoiced_run = 0
        self.in_speech = False
        self.last_voiced = False

    def frame(self, pcm16: bytes) -> SpeechBoundary | None:
        """Classify one 20 ms frame at the engine rate (16 kHz)."""
        voiced = self.last_voiced = self._vad.is_speech(pcm16, SAMPLE_RATE_HZ)
        index = self._frame_index
        self._frame_index += 1
        if not self.in_speech:
            self._window.append((index, voiced))
            if sum(v for _, v in self._window) >= START_VOICED_FRAMES:
                first = next(i for i, v in self._window if v)
                self.in_speech = True
                self._unvoiced_run = 0
                self._window.clear()
                return SpeechBoundary(True, first * FRAME_MS)
            return None
        self._unvoiced_run = 0 if voiced else self._unvoiced_run + 1
        if self._unvoiced_run >= self._silence_frames:
            return self._end(index - self._unvoiced_run + 1)
        return None

    def finish(self) -> SpeechBoundary | None:
        """End of audio: close open speech at the end of the last voiced frame."""
        if not self.in_speech:
            return None
        return self._end(self._frame_index - self._unvoiced_run)

    def _end(self, end_frame: int) -> SpeechBoundary:
        self.in_speech = False
        self._unvoiced_run = 0
        return SpeechBoundary(False, end_frame * FRAME_MS)
