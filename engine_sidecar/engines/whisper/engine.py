"""The whisper engine: utterances re-decoded on a cadence, words committed by LocalAgreement-2.

The service's VAD and endpointing cut utterances (flush). Within one, every INTERIM_EVERY_MS of new audio
the audio since a second before the last word sent is decoded again; the words on which two consecutive
decodes agree are sent as deltas (ufal's whisper_streaming). At the end of the utterance a decode of all of
it is the final (continued where Whisper ends its text early: WhisperDecoder.transcribe): words it adds to
what was sent come as deltas, and where it disagrees a Revision replaces the utterance's deltas. So the
interim stability is "revisable". An utterance longer than SEGMENT_MS is cut after the last word that ends
before its last second: that part's decode is final, and its text is the next part's prompt.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

from engine_api.audio import BYTES_PER_MS
from engine_api.info import EngineInfo, InterimStability
from engine_api.outputs import Flushed
from engine_api.phrases import PhraseHint, PhraseHintSupport
from engine_api.status import EngineStatus
from engine_sidecar.engines.base import ChannelSession
from engine_sidecar.engines.engine import EngineCounters
from engine_sidecar.engines.limits import WHISPER_ADMISSION_LAG, WHISPER_SEGMENT, WHISPER_STREAMS_PER_CORE
from engine_sidecar.engines.whisper import hints
from engine_sidecar.engines.whisper.decode_queue import DecodeQueue, DecodeRequest
from engine_sidecar.engines.whisper.decoder import Hypothesis, WhisperDecoder
from engine_sidecar.engines.whisper.model import check, source_for
from engine_sidecar.engines.words import Word, agreed_prefix, delta, final_outputs, texts, word_key

# A word is sent once two decodes agree on it: about 1.5 cadences after it is spoken. Under load each stream's
# interims come less often by themselves (one waits per stream), so the cadence is a floor, not a promise.
INTERIM_EVERY_MS = 300
INTERIM_CONTEXT_MS = 1000
PROMPT_WORDS = 100
PREROLL_MS = 300  # audio kept before an utterance's first speech (the VAD flags speech a little late)
SEGMENT_MS = WHISPER_SEGMENT.value  # Whisper's window is 30 s
CUT_MARGIN_MS = 1000  # a segment is cut after a word that ends this much before its end (no cut words)
SAME_WORD_MS = 400  # one word's end in two decodes of different windows
# Real-time streams a core carries with interims on time (docs/benchmarks.md §4: 4 on 2 cores): the engine
# admits at most this many per decode worker, whatever --max-sessions says.
STREAMS_PER_CORE = WHISPER_STREAMS_PER_CORE.value
# New sessions are refused while the decoder is this far behind (its oldest job's wait).
ADMISSION_LAG_S = WHISPER_ADMISSION_LAG.value / 1000
# A decode that runs this long is a hung decoder: the sessions stop reporting Progress, so the service's
# freeze watchdog can move them.
STALLED_DECODE_S = 30.0


def cpu_threads() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _continuation(words: list[Word], said: list[Word]) -> int:
    """Where a hypothesis goes on from the words already said: after them when it starts with them; else after
    its word that is the last one said, heard again where it was said (an interim decode starts a second
    before that word ends); else at its first word that is mostly after the last one said. So a said word the
    decoder now hears otherwise ("asked" for "ask") does not stop the interims: the final revises it."""
    if not said or [word_key(w.text) for w in words[: len(said)]] == [word_key(w.text) for w in said]:
        return len(said)
    last = said[-1]
    again = [
        i
        for i, w in enumerate(words)
        if word_key(w.text) == word_key(last.text) and abs(w.end_ms - last.end_ms) <= SAME_WORD_MS
    ]
    if again:
        return min(again, key=lambda i: abs(words[i].end_ms - last.end_ms)) + 1
    return next((i for i, w in enumerate(words) if w.start_ms + w.end_ms >= 2 * last.end_ms), len(words))


def _prompt(words: list[Word]) -> str:
    """The text before a decode's audio: its last PROMPT_WORDS words (Whisper reads at most 223 tokens of it)."""
    return " ".join(texts(words[-PROMPT_WORDS:]))


class UtteranceAudio:
    """An utterance's audio as the engine decodes it: from PREROLL_MS before its first speech on."""

    def __init__(self, start_ms: int) -> None:
        self.pcm16 = bytearray()
        self.start_ms = start_ms  # session audio time of pcm16[0]
        self.speech = False  # a chunk of it was speech (else it is never decoded)

    def add(self, pcm16: bytes, speech: bool) -> None:
        self.pcm16 += pcm16
        self.speech = self.speech or speech
        if not self.speech:
            drop = max(0, len(self.pcm16) - PREROLL_MS * BYTES_PER_MS)
            del self.pcm16[:drop]
            self.start_ms += drop // BYTES_PER_MS

    def drop_until(self, ms: int) -> None:
        """Forget the audio before session time ms."""
        del self.pcm16[: max(0, ms - self.start_ms) * BYTES_PER_MS]
        self.start_ms = max(self.start_ms, ms)

    @property
    def ms(self) -> int:
        return len(self.pcm16) // BYTES_PER_MS


class WhisperSession(ChannelSession):
    def __init__(
        self,
        queue: DecodeQueue,
        counters: EngineCounters,
        language: str,
        stalled: Callable[[], bool],
        phrases: tuple[str, ...] = (),
    ) -> None:
        super().__init__(counters)
        self._queue = queue
        self._language = language
        self._phrases = phrases  # phrase hints, for the final decodes (whisper/hints.py)
        self._stalled = stalled
        self._interim: asyncio.Task[None] | None = None
        self._segment = 0
        self._new_utterance()

    def _in_utterance(self) -> bool:
        return self._audio.speech or bool(self._closed_segments)

    def _use_hints(self, given: tuple[PhraseHint, ...]) -> None:
        self._phrases = hints.phrases(given)

    def _new_utterance(self) -> None:
        self._audio = UtteranceAudio(self._audio_ms)  # the current segment's
        self._segment += 1  # which segment an interim decode was asked for
        self._decoded_ms = 0  # segment audio the last interim decode asked for
        self._new_speech = False  # speech came since then (no new words are decoded from silence)
        self._previous: list[Word] = []  # the last interim hypothesis of the segment
        self._committed: list[Word] = []  # the utterance's deltas so far
        self._segment_committed = 0  # where the segment's words start in _committed
        self._closed_segments: list[Word] = []  # the final words of the utterance's earlier segments

    def _request(self) -> DecodeRequest:
        """All the words of the segment's audio, after the text of the utterance's earlier segments."""
        prompt = _prompt(self._closed_segments)
        return DecodeRequest(
            bytes(self._audio.pcm16), self._audio.start_ms, prompt, self._language, whole=True, phrases=self._phrases
        )

    def _interim_request(self) -> DecodeRequest:
        """The segment's audio from INTERIM_CONTEXT_MS before the end of its last word sent, after the text of
        the utterance so far: an interim decode's cost stays that of a few seconds, whatever the utterance's
        length (the words it hears before that end are not sent again: _continuation)."""
        said = self._committed[self._segment_committed :]
        start_ms = max(self._audio.start_ms, said[-1].end_ms - INTERIM_CONTEXT_MS) if said else self._audio.start_ms
        pcm16 = bytes(self._audio.pcm16[(start_ms - self._audio.start_ms) * BYTES_PER_MS :])
        prompt = _prompt(self._closed_segments + said)
        return DecodeRequest(pcm16, start_ms, prompt, self._language)

    async def push_audio(self, pcm16: bytes, speech: bool) -> None:
        self._audio_ms += len(pcm16) // BYTES_PER_MS
        self._audio.add(pcm16, speech)
        self._new_speech = self._new_speech or speech
        if not self._audio.speech:
            return await self._progress()
        if self._audio.ms >= SEGMENT_MS:
            await self._cut_segment()
        buffered_ms = self._audio.ms
        idle = self._interim is None or self._interim.done()
        if self._new_speech and buffered_ms - self._decoded_ms >= INTERIM_EVERY_MS and idle:
            self._decoded_ms, self._new_speech = buffered_ms, False
            self._interim = asyncio.ensure_future(self._interim_decode(self._interim_request(), self._segment))
        await self._progress()

    async def _progress(self) -> None:
        if not self._stalled():
            await self._out.progress(self._audio_ms)

    async def _interim_decode(self, request: DecodeRequest, segment: int) -> None:
        hypothesis = await self._queue.interim(self, request)
        if hypothesis is None or segment != self._segment:
            return  # withdrawn, or the segment it was asked for is over
        said = self._committed[self._segment_committed :]
        words, previous = list(hypothesis.words), self._previous
        self._previous = words
        new, before = words[_continuation(words, said) :], previous[_continuation(previous, said) :]
        for w in new[: agreed_prefix([before, new], word_key)]:
            await self._out.put(delta(w))
            self._committed.append(w)

    async def _settle_interim(self) -> None:
        """No interim decode runs or waits after this: a queued one is withdrawn, a running one finishes."""
        self._queue.withdraw(self)
        if self._interim is not None:
            await asyncio.gather(self._interim, return_exceptions=True)
            self._interim = None

    async def _cut_segment(self) -> None:
        """The segment reached SEGMENT_MS: its words up to a cut point are final; the rest starts the next."""
        await self._settle_interim()
        hypothesis = await self._with_heartbeat(self._queue.final(self, self._request()))
        end_ms = self._audio_ms - CUT_MARGIN_MS
        kept = [w for w in hypothesis.words if w.end_ms <= end_ms]
        cut_ms = kept[-1].end_ms if kept else end_ms
        said = self._committed[self._segment_committed :]
        if texts(kept[: len(said)]) == texts(said):
            for w in kept[len(said) :]:
                await self._out.put(delta(w))
                self._committed.append(w)
        self._closed_segments += kept
        self._segment_committed = len(self._committed)
        self._audio.drop_until(cut_ms)
        self._segment += 1
        self._decoded_ms = 0
        self._previous = []

    async def flush(self, marker: int) -> None:
        await self._settle_interim()
        final = list(self._closed_segments)
        if self._audio.speech and self._audio.pcm16:
            hypothesis: Hypothesis = await self._with_heartbeat(self._queue.final(self, self._request()))
            final += hypothesis.words
        for output in final_outputs(self._committed, final):
            await self._out.put(output)
        self._new_utterance()
        self._utterance_ended()
        await self._out.put(Flushed(marker=marker, audio_ms=self._audio_ms))

    async def abort(self) -> None:
        self._queue.withdraw(self)
        if self._interim is not None:
            self._interim.cancel()
        await super().abort()


class WhisperEngine:
    def __init__(self, model: str, max_sessions: int, workers: int = 0) -> None:
        self._source = source_for(model)
        self._workers = workers or cpu_threads()
        self._counters = EngineCounters()
        self._queue: DecodeQueue | None = None
        capacity = STREAMS_PER_CORE * self._workers
        self.info = EngineInfo(
            name="whisper",
            model=self._source.name,
            max_sessions=min(max_sessions, capacity) if max_sessions else capacity,
            languages=("en",),
            interim_stability=InterimStability.REVISABLE,
            phrase_hints=PhraseHintSupport.PROMPT,
        )

    async def start(self) -> None:
        check(self._source)  # a missing, corrupted or wrong model fails here, named
        decoder = await asyncio.to_thread(WhisperDecoder, self._source.directory, 1, self._workers)
        self.info = EngineInfo(
            name=self.info.name,
            model=self.info.model,
            max_sessions=self.info.max_sessions,
            languages=decoder.languages,
            interim_stability=self.info.interim_stability,
            phrase_hints=self.info.phrase_hints,
        )
        self._queue = DecodeQueue(decoder, self._workers)
        self._queue.start()

    async def open_session(
        self, session_id: str, language_code: str, phrase_hints: tuple[PhraseHint, ...] = ()
    ) -> WhisperSession:
        assert self._queue is not None, "start() first"
        language = language_code.split("-")[0].lower() or self.info.languages[0]
        if language not in self.info.languages:
            language = self.info.languages[0]
        self._counters.opened()
        queue = self._queue
        stalled = queue.busy_s
        return WhisperSession(
            queue, self._counters, language, lambda: stalled() > STALLED_DECODE_S, hints.phrases(phrase_hints)
        )

    def status(self) -> EngineStatus:
        lag = self._queue.lag_s() if self._queue is not None else 0.0
        if lag > ADMISSION_LAG_S:
            return EngineStatus.from_refusal(f"whisper decoding is {lag:.1f} s behind (limit {ADMISSION_LAG_S} s)")
        return EngineStatus()

    def counters(self) -> dict[str, int]:
        if self._queue is not None:
            self._counters.extra.update(decodes=self._queue.decodes, decode_ms=int(self._queue.decode_s * 1000))
        return self._counters.as_dict()

    async def shutdown(self) -> None:
        if self._queue is not None:
            await self._queue.stop()
