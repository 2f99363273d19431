"""Speech boundaries in the order voice-agent frameworks expect: end of speech after the final.

voxgate detects speech on the audio as it arrives, ahead of the engine, so an utterance's
SPEECH_ENDED comes before its final result, and when audio is backed up (after a reconnect, or an
engine under load) the next SPEECH_STARTED can come before it too. LiveKit Agents and Pipecat read
end of speech as "this turn's transcript is complete". SpeechOrder holds each end, and the
boundaries behind it, until the utterance's final is out, or until text that starts after the end
shows that the utterance had no final. Its methods return the boundaries to emit now, in order;
the caller turns each into its framework's event.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass


@dataclass(frozen=True)
class SpeechBoundary:
    started: bool  # True: speech starts; False: it ends
    offset_s: float | None  # None: the session ended with speech open


class SpeechOrder:
    def __init__(self) -> None:
        self._held: collections.deque[SpeechBoundary] = collections.deque()
        self.speaking = False

    def speech_event(self, started: bool, offset_s: float) -> list[SpeechBoundary]:
        """A SpeechEvent from the server."""
        if self._held:  # an earlier end still waits for its final: this boundary waits behind it
            self._held.append(SpeechBoundary(started, offset_s))
            return []
        if started:
            return self._start(offset_s)
        if self.speaking:
            self._held.append(SpeechBoundary(False, offset_s))
        return []

    def interim(self, start_s: float) -> list[SpeechBoundary]:
        """Before an interim result with text that starts at start_s."""
        out: list[SpeechBoundary] = []
        if self._held and start_s >= (self._held[0].offset_s or 0.0):
            out += self._release()  # text after the held end: its utterance had no final
        if not self.speaking:  # an engine result with no speech event before it
            out += self._start(start_s)
        return out

    def final(self) -> list[SpeechBoundary]:
        """After a final result (with text or without): the end it closes goes out."""
        return self._release() if self._held else []

    def close(self) -> list[SpeechBoundary]:
        """The session is over: every held boundary goes out, and an open speech segment ends."""
        return self._release(everything=True) + self._end(None)

    def reset(self) -> None:
        """Forget the session's speech state (a stream being torn down emits nothing more)."""
        self._held.clear()
        self.speaking = False

    def _release(self, everything: bool = False) -> list[SpeechBoundary]:
        """Emit the first held end and the boundaries behind it, up to the next end, which then
        waits for its own final in turn."""
        out: list[SpeechBoundary] = []
        first = True
        while self._held:
            boundary = self._held[0]
            if not boundary.started and not first and not everything and self.speaking:
                break
            self._held.popleft()
            first = False
            offset = boundary.offset_s
            out += self._start(offset) if boundary.started else self._end(offset)
        return out

    def _start(self, offset_s: float | None) -> list[SpeechBoundary]:
        if self.speaking:
            return []
        self.speaking = True
        return [SpeechBoundary(True, offset_s)]

    def _end(self, offset_s: float | None) -> list[SpeechBoundary]:
        if not self.speaking:
            return []
        self.speaking = False
        return [SpeechBoundary(False, offset_s)]
