"""A deterministic, scriptable engine for tests: no model, exact timing, injectable faults.

Script (JSON file passed as the model; every key optional):
  {"words": [["hello", 500], ["world", 900]],  # text and audio time (ms); default: one
                                              #   word per word_ms of speech-flagged audio
   "word_ms": 400, "delay_ms": 0,            # output lags audio by delay_ms
   "blank_only": false,                       # emit nothing at all (a "rut")
   "stall_at_ms": null,                       # stop consuming audio from this time on
   "crash_at_ms": null,                       # SIGKILL the sidecar at this audio time
   "step_sleep_ms": 0,                        # processing time per chunk
   "open_ms": 0,                              # time to open a session (like loading a decoder;
                                              #   counted as engine_waiting meanwhile)
   "refuse_while": ""}                        # admission off (status) while this file exists

Phrase hints stand in for biasing where tests can see it: the words of the phrases with a positive boost, in
order, replace the vocabulary the generated words cycle through.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from engine_api.audio import BYTES_PER_MS
from engine_api.info import EngineInfo
from engine_api.outputs import Delta, Flushed
from engine_api.phrases import PhraseHint, PhraseHintSupport
from engine_api.status import EngineStatus
from engine_sidecar.engines.base import ChannelSession
from engine_sidecar.engines.engine import EngineCounters

VOCABULARY = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
WORD_DURATION_MS = 300


@dataclass(frozen=True)
class FakeScript:
    words: tuple[tuple[str, int], ...] = ()
    word_ms: int = 400
    delay_ms: int = 0
    blank_only: bool = False
    stall_at_ms: int | None = None
    crash_at_ms: int | None = None
    step_sleep_ms: int = 0
    open_ms: int = 0
    refuse_while: str = ""

    @classmethod
    def load(cls, path: str) -> FakeScript:
        if not path:
            return cls()
        raw = json.loads(Path(path).read_text())
        words = tuple((str(t), int(ms)) for t, ms in raw.pop("words", []))
        return cls(words=words, **raw)


def _vocabulary(hints: tuple[PhraseHint, ...]) -> tuple[str, ...]:
    """The words generated words cycle through: the favoured phrases' words, else VOCABULARY."""
    favoured = tuple(word for h in hints if h.boost > 0 for word in h.text.split())
    return favoured or VOCABULARY


class FakeSession(ChannelSession):
    def __init__(self, script: FakeScript, counters: EngineCounters, phrase_hints: tuple[PhraseHint, ...] = ()) -> None:
        super().__init__(counters)
        self._script = script
        self._speech_ms = 0
        self._pending = list(script.words)
        self._generated = 0
        self._vocabulary = _vocabulary(phrase_hints)
        self._speaking = False  # speech came since the last flush

    def _in_utterance(self) -> bool:
        return self._speaking

    def _use_hints(self, hints: tuple[PhraseHint, ...]) -> None:
        self._vocabulary = _vocabulary(hints)

    async def push_audio(self, pcm16: bytes, speech: bool) -> None:
        s = self._script
        if s.stall_at_ms is not None and self._audio_ms >= s.stall_at_ms:
            await asyncio.Event().wait()  # a silent freeze: never returns
        if s.crash_at_ms is not None and self._audio_ms >= s.crash_at_ms:
            os.kill(os.getpid(), signal.SIGKILL)
        if s.step_sleep_ms:
            await asyncio.sleep(s.step_sleep_ms / 1000)
        chunk_ms = len(pcm16) // BYTES_PER_MS
        self._speaking = self._speaking or speech
        if speech and not s.words:
            self._speech_ms += chunk_ms
            while self._speech_ms >= s.word_ms:
                self._speech_ms -= s.word_ms
                start = self._audio_ms + chunk_ms - self._speech_ms - s.word_ms
                self._pending.append((self._vocabulary[self._generated % len(self._vocabulary)], max(start, 0)))
                self._generated += 1
        self._audio_ms += chunk_ms
        await self._emit_until(self._audio_ms - s.delay_ms)
        await self._out.progress(self._audio_ms)

    async def _emit_until(self, audio_ms: int) -> None:
        while self._pending and self._pending[0][1] <= audio_ms:
            text, at = self._pending.pop(0)
            if not self._script.blank_only:
                await self._out.put(Delta(text=" " + text, start_ms=at, end_ms=at + WORD_DURATION_MS))

    async def flush(self, marker: int) -> None:
        await self._emit_until(self._audio_ms)
        self._speaking = False
        self._utterance_ended()
        await self._out.put(Flushed(marker=marker, audio_ms=self._audio_ms))


class FakeEngine:
    def __init__(self, script_path: str, max_sessions: int) -> None:
        self._script = FakeScript.load(script_path)
        self.info = EngineInfo(
            name="fake",
            model=script_path or "fake (default script)",
            max_sessions=max_sessions,
            languages=("en-US",),
            phrase_hints=PhraseHintSupport.BOOST,
        )
        self._counters = EngineCounters()
        self._opening = 0  # sessions waiting in open_session (open_ms): its queue, reported as engine_waiting

    async def start(self) -> None:
        return None

    async def open_session(
        self, session_id: str, language_code: str, phrase_hints: tuple[PhraseHint, ...] = ()
    ) -> FakeSession:
        if self._script.open_ms:
            self._opening += 1
            try:
                await asyncio.sleep(self._script.open_ms / 1000)
            finally:
                self._opening -= 1
        self._counters.opened()
        return FakeSession(self._script, self._counters, phrase_hints)

    def status(self) -> EngineStatus:
        gate = self._script.refuse_while
        return EngineStatus.from_refusal(
            f"refusing new sessions while {gate} exists" if gate and Path(gate).exists() else None
        )

    def counters(self) -> dict[str, int]:
        return {**self._counters.as_dict(), "engine_waiting": self._opening}

    async def shutdown(self) -> None:
        return None
