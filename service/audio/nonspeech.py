"""What a stream carries instead of speech: music (on hold, in an IVR, behind a caller) and DTMF digits.

Runs in the service process, per stream, on the speech gate's verdicts (vad.NeuralGate): a 32 ms window
is music where the network hears no speech, the audio is tonal, and no keypad tone sounds. Music starts
after MUSIC_START_MS of such windows in a run (rests between notes, silent windows, do not break it;
RUN_BREAK_MS of anything else does) and ends after MUSIC_END_MS without one: the caller talking, noise,
or silence. So a melody's pauses do not end it, a word or two over the music does not either, and a
ringback's 4 s gaps do. Ringback and mains hum are tonal too: they are reported as music.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

MUSIC_START_MS = 1000
MUSIC_END_MS = 1500
RUN_BREAK_MS = 300  # before music starts, this much of something else in a row breaks its run (a note's
# attack is broadband for a window or two; a word lasts longer)


class Sound(Enum):
    MUSIC_STARTED = "music_started"
    MUSIC_ENDED = "music_ended"
    DTMF = "dtmf"


@dataclass(frozen=True)
class NonSpeech:
    """Something the stream carries that is not speech, at offset_ms of the stream's 16 kHz audio."""

    sound: Sound
    offset_ms: int
    digit: str = ""  # DTMF only: 0-9, *, #, A-D


class MusicTracker:
    """Music's start and end from one window's verdict at a time, in order."""

    def __init__(self) -> None:
        self.playing = False
        self._run_start_ms: int | None = None  # while not playing: where the current run of music began
        self._music_ms = 0  # ... and how much of it was music
        self._other_ms = 0  # ... and how much of something else has come since its last music
        self._quiet_since_ms: int | None = None  # while playing: where the current run without music began

    def window(self, start_ms: int, length_ms: int, music: bool, silent: bool) -> NonSpeech | None:
        if not self.playing:
            if music:
                self._run_start_ms = start_ms if self._run_start_ms is None else self._run_start_ms
                self._music_ms += length_ms
                self._other_ms = 0
                if self._music_ms >= MUSIC_START_MS:
                    began = self._run_start_ms
                    self.playing, self._run_start_ms, self._music_ms, self._other_ms = True, None, 0, 0
                    return NonSpeech(Sound.MUSIC_STARTED, began)
            elif not silent and self._run_start_ms is not None:  # speech or noise breaks the run; a rest does not
                self._other_ms += length_ms
                if self._other_ms >= RUN_BREAK_MS:
                    self._run_start_ms, self._music_ms, self._other_ms = None, 0, 0
            return None
        if music:
            self._quiet_since_ms = None
            return None
        self._quiet_since_ms = start_ms if self._quiet_since_ms is None else self._quiet_since_ms
        if start_ms + length_ms - self._quiet_since_ms >= MUSIC_END_MS:
            ended = self._quiet_since_ms
            self.playing, self._quiet_since_ms = False, None
            return NonSpeech(Sound.MUSIC_ENDED, ended)
        return None

    def finish(self, end_ms: int) -> NonSpeech | None:
        """The end of the stream: music still playing ends where the stream does (or where it went quiet)."""
        if not self.playing:
            return None
        self.playing = False
        return NonSpeech(Sound.MUSIC_ENDED, self._quiet_since_ms if self._quiet_since_ms is not None else end_ms)
