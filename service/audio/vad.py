"""webrtcvad over 20 ms frames: speech start/end events and silence endpoints.

Speech starts when most of a short window is voiced (one voiced click is not
speech); it ends after `silence_ms` of unvoiced audio, which is also the
endpoint that closes an utterance. With a `NeuralGate` (--speech-detector
silero) a frame is voiced only where the gate allows it too, so music under a
voice does not hold an utterance open and music alone never opens one.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import webrtcvad

from engine_api.audio import BYTES_PER_MS, SAMPLE_RATE_HZ

from .dtmf import DtmfDetector
from .nonspeech import MusicTracker, NonSpeech, Sound
from .speech_model import WINDOW_SAMPLES, SpeechProbability

FRAME_MS = 20
FRAME_BYTES = BYTES_PER_MS * FRAME_MS
TONE_TAIL_FRAMES = 3  # a 32 ms window overlaps two 20 ms frames: a tone's last frame reaches the next window
WINDOW_MS = WINDOW_SAMPLES * 1000 // SAMPLE_RATE_HZ  # the network's (32 ms)
START_WINDOW_FRAMES = 10
START_VOICED_FRAMES = 6
# With the network: 260 ms of speech in 400 ms (Silero's own minimum speech is 250 ms). Music fools it for
# a window or a few at an onset (up to 160 ms seen); a syllable lasts longer.
GATED_START_WINDOW_FRAMES = 20
GATED_START_VOICED_FRAMES = 13


@dataclass(frozen=True)
class SpeechBoundary:
    started: bool  # True: speech started; False: speech ended (an endpoint)
    offset_ms: int


class NeuralGate:
    """Whether a 20 ms frame may be speech, from the latest 32 ms windows: not where the network hears no
    speech and the audio is tonal (music, tones, hum). The network alone would also drop voices it misses
    (a hoarse one at 8 kHz scores below 0.15); those are not tonal, so webrtcvad keeps deciding for them.

    The network's verdict has hysteresis (Silero's own defaults: speech from 0.5, no longer below 0.35), so
    a word's soft end does not flicker; tonality is the median flatness of the last TONAL_WINDOWS windows
    that were not silent. What it hears instead of speech (music, DTMF digits) waits in `heard`.
    """

    SPEECH_FROM = 0.5
    SPEECH_UNTIL = 0.35
    TONAL_FLATNESS = 0.25  # music and tones measured 0.004-0.15, speech 0.35 and up (tonality.py)
    TONAL_WINDOWS = 5  # 160 ms: a note or a tone, not one harmonic moment of a vowel

    def __init__(self, detector: SpeechProbability) -> None:
        self._detector = detector
        self._dtmf = DtmfDetector()  # a keypad's tone is never speech
        self._music = MusicTracker()
        self._flatness: deque[float] = deque(maxlen=self.TONAL_WINDOWS)
        self._windows = 0
        self._frames = 0
        self._since_tone = TONE_TAIL_FRAMES  # frames since the last DTMF tone
        self.speech = False
        self.tonal = False
        self.heard: list[NonSpeech] = []  # not speech, in stream order; the caller takes them

    def frame(self, pcm16: bytes) -> bool:
        digit = self._dtmf.frame(pcm16)
        if digit is not None:
            self.heard.append(NonSpeech(Sound.DTMF, digit.offset_ms, digit.key))
        self._since_tone = 0 if self._dtmf.in_tone else self._since_tone + 1
        for window in self._detector.push(pcm16):
            if window.speech_probability >= self.SPEECH_FROM:
                self.speech = True
            elif window.speech_probability < self.SPEECH_UNTIL:
                self.speech = False
            silent = bool(np.isnan(window.flatness))
            if not silent:  # a gap between tones says nothing of them
                self._flatness.append(window.flatness)
                self.tonal = float(np.median(self._flatness)) < self.TONAL_FLATNESS
            keyed = self._since_tone < TONE_TAIL_FRAMES  # a window that holds part of a key's tone
            # The window itself tonal too: the median lags a voice's onset after music or a tone by a window.
            music = not self.speech and self.tonal and window.flatness < self.TONAL_FLATNESS and not keyed
            start_ms = self._windows * WINDOW_MS
            self._windows += 1
            event = self._music.window(start_ms, WINDOW_MS, music, silent)
            if event is not None:
                self.heard.append(event)
        self._frames += 1
        return (self.speech or not self.tonal) and not self._dtmf.in_tone

    def finish(self) -> None:
        """The end of the stream: music still playing ends here."""
        event = self._music.finish(self._frames * FRAME_MS)
        if event is not None:
            self.heard.append(event)


class VoiceActivity:
    def __init__(self, aggressiveness: int, silence_ms: int, gated: bool = False) -> None:
        """gated: a NeuralGate's verdict comes with every frame (the caller's), so starts need more speech."""
        self._vad = webrtcvad.Vad(aggressiveness)
        self._silence_frames = max(1, silence_ms // FRAME_MS)
        self._start_voiced = GATED_START_VOICED_FRAMES if gated else START_VOICED_FRAMES
        self._window: deque[tuple[int, bool]] = deque(
            maxlen=GATED_START_WINDOW_FRAMES if gated else START_WINDOW_FRAMES
        )
        self._frame_index = 0
        self._unvoiced_run = 0
        self.in_speech = False
        self.last_voiced = False

    def frame(self, pcm16: bytes, may_be_speech: bool = True) -> SpeechBoundary | None:
        """Classify one 20 ms frame at the engine rate (16 kHz); may_be_speech: the gate's verdict on it."""
        voiced = self._vad.is_speech(pcm16, SAMPLE_RATE_HZ) and may_be_speech  # webrtcvad adapts: every frame
        self.last_voiced = voiced
        index = self._frame_index
        self._frame_index += 1
        if not self.in_speech:
            self._window.append((index, voiced))
            if sum(v for _, v in self._window) >= self._start_voiced:
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
