"""PocketSphinx: the embedded CPU engine (English, modest accuracy, model ships in the wheel).

PocketSphinx revises its partial hypothesis as audio arrives. Interim text is
append-only within an utterance, so a word is emitted early only once it has
stayed the same in every partial hypothesis over the last STABLE_MS of audio
and ended at least SETTLE_MS before the newest audio (and never past a point
where the partial hypothesis stopped agreeing with what was emitted). At flush the decoder's
own final hypothesis for the utterance is the answer: the words it adds come
out as deltas when it agrees with the words already emitted, and as a Revision
(the whole hypothesis, replacing them) when it does not. So the engine's
interim stability is "revisable", and the final text is exactly what the
decoder says for the utterance's samples.
"""

from __future__ import annotations

import asyncio
import ctypes
import os

from engine_api.audio import BYTES_PER_MS, SAMPLE_RATE_HZ
from engine_api.info import EngineInfo, InterimStability
from engine_api.outputs import Flushed
from engine_api.phrases import PhraseHint
from engine_api.status import EngineStatus
from engine_sidecar.engines.base import ChannelSession
from engine_sidecar.engines.engine import EngineCounters
from engine_sidecar.engines.words import Word, agreed_prefix, delta, final_outputs, texts

FRAME_MS = 10  # PocketSphinx frame rate is 100 frames/s
STABLE_MS = 600
SETTLE_MS = 400
FILLERS = frozenset({"<s>", "</s>", "<sil>"})


def _words(segments: object, utterance_start_ms: int) -> list[Word]:
    words = []
    for seg in segments or ():  # type: ignore[attr-defined]
        text: str = seg.word
        if text in FILLERS or text.startswith("[") or text.startswith("++"):
            continue
        text = text.split("(", 1)[0]  # "read(2)" is a pronunciation variant of "read"
        words.append(
            Word(
                text,
                utterance_start_ms + seg.start_frame * FRAME_MS,
                utterance_start_ms + (seg.end_frame + 1) * FRAME_MS,
            )
        )
    return words


class SphinxSession(ChannelSession):
    def __init__(self, decoder: object, counters: EngineCounters) -> None:
        super().__init__(counters)
        self._decoder = decoder
        self._utterance_start_ms = 0
        self._committed: list[Word] = []  # emitted as deltas in this utterance
        self._history: list[tuple[int, list[Word]]] = []  # (audio_ms, hypothesis)
        decoder.start_utt()  # type: ignore[attr-defined]

    async def push_audio(self, pcm16: bytes, speech: bool) -> None:
        words = await asyncio.to_thread(self._decode, pcm16)
        self._audio_ms += len(pcm16) // BYTES_PER_MS
        await self._out.progress(self._audio_ms)  # decoded: words it holds back wait for more audio
        self._history.append((self._audio_ms, words))
        while len(self._history) > 1 and self._history[1][0] <= self._audio_ms - STABLE_MS:
            self._history.pop(0)
        if self._history[0][0] > self._audio_ms - STABLE_MS:
            return  # not enough history yet
        stable = agreed_prefix([h for _, h in self._history])
        done = len(self._committed)
        while stable > done and words[stable - 1].end_ms > self._audio_ms - SETTLE_MS:
            stable -= 1
        if stable > done and texts(words[:done]) == texts(self._committed):
            await self._emit(words[done:stable])

    def _decode(self, pcm16: bytes) -> list[Word]:
        d = self._decoder
        d.process_raw(pcm16, False, False)  # type: ignore[attr-defined]
        return _words(d.seg(), self._utterance_start_ms)  # type: ignore[attr-defined]

    def _end_utterance(self) -> list[Word]:
        d = self._decoder
        d.end_utt()  # type: ignore[attr-defined]
        words = _words(d.seg(), self._utterance_start_ms)  # type: ignore[attr-defined]
        d.start_utt()  # type: ignore[attr-defined]
        return words

    async def _final_pass(self) -> list[Word]:
        """The decoder's final hypothesis, with a Progress heartbeat while it is computed."""
        return await self._with_heartbeat(asyncio.to_thread(self._end_utterance))

    async def _emit(self, words: list[Word]) -> None:
        for w in words:
            await self._out.put(delta(w))
        self._committed += words

    async def flush(self, marker: int) -> None:
        final = await self._final_pass()
        for output in final_outputs(self._committed, final):
            await self._out.put(output)
        self._utterance_start_ms = self._audio_ms
        self._committed = []
        self._history = []
        await self._out.put(Flushed(marker=marker, audio_ms=self._audio_ms))


# PocketSphinx decodes in asyncio's worker threads and each thread's ~110 MiB decoder allocations land in
# another glibc malloc arena, which is never returned: RSS grew 100 -> 1178 MiB over nine rounds of four clean
# sessions (the wire fuzz's RSS invariant). Two arenas keep it flat (~660 MiB at four sessions).
MALLOC_ARENAS = 2
M_ARENA_MAX = -8  # glibc's mallopt parameter


def cap_malloc_arenas(arenas: int) -> bool:
    """Cap glibc's malloc arenas for the threads this process starts from now on, unless MALLOC_ARENA_MAX in the
    environment already says how many; False where there is no glibc mallopt (musl)."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    return mallopt is not None and bool(mallopt(M_ARENA_MAX, arenas))


class SphinxEngine:
    def __init__(self, model: str, max_sessions: int) -> None:
        self._model_dir = model
        self.info = EngineInfo(
            name="sphinx",
            model=model or "pocketsphinx en-us (bundled)",
            max_sessions=max_sessions,
            languages=("en-US",),
            interim_stability=InterimStability.REVISABLE,
        )
        self._counters = EngineCounters()
        self._spare: asyncio.Future[object] | None = None

    def _new_decoder(self) -> object:
        from pocketsphinx import Decoder

        kwargs: dict[str, object] = {"samprate": SAMPLE_RATE_HZ, "loglevel": "FATAL"}
        if self._model_dir:
            kwargs["hmm"] = self._model_dir
        return Decoder(**kwargs)

    async def start(self) -> None:
        cap_malloc_arenas(MALLOC_ARENAS)
        # Load the model once so a broken install fails at start, not in a session; that decoder is the spare.
        self._spare_decoder()
        assert self._spare is not None
        await asyncio.shield(self._spare)

    def _spare_decoder(self) -> None:
        """Build the next session's decoder ahead (0.5-2 s of CPU): a session opened after an engine loss
        elsewhere, or any new one, starts without waiting for it. Always a fresh decoder: one that decoded
        another session carries its adaptation, and the final must be the decoder's answer for these samples."""
        if self._spare is None:
            self._spare = asyncio.ensure_future(asyncio.to_thread(self._new_decoder))

    async def open_session(
        self, session_id: str, language_code: str, phrase_hints: tuple[PhraseHint, ...] = ()
    ) -> SphinxSession:
        spare, self._spare = self._spare, None
        decoder = await spare if spare is not None else await asyncio.to_thread(self._new_decoder)
        self._spare_decoder()
        self._counters.opened()
        return SphinxSession(decoder, self._counters)

    def status(self) -> EngineStatus:
        return EngineStatus()

    def counters(self) -> dict[str, int]:
        return self._counters.as_dict()

    async def shutdown(self) -> None:
        if self._spare is not None:
            self._spare.cancel()
