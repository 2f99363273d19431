"""The whisper engine's streaming logic, on a scripted decoder: LocalAgreement-2 interims, the final as one
decode, segments of long utterances, the decode queue's order, and no decode of silence."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from engine_api.audio import BYTES_PER_MS
from engine_api.outputs import Closed, Delta, EngineOutput, Flushed, Progress, Revision
from engine_api.phrases import PhraseHint
from engine_sidecar.engines.engine import EngineCounters
from engine_sidecar.engines.whisper.decode_queue import DecodeQueue, DecodeRequest
from engine_sidecar.engines.whisper.decoder import Hypothesis, WhisperDecoder, join_punctuation, without_loops
from engine_sidecar.engines.whisper.engine import SEGMENT_MS, WhisperSession, word_key
from engine_sidecar.engines.whisper.hints import choose, gained, phrases, says
from engine_sidecar.engines.words import Word, agreed_prefix

CHUNK_MS = 80


class ScriptedDecoder:
    """Hears the words of a script that end inside the audio it is given; `hear(words, audio_ms)` rewrites
    what it hears in a decode of audio_ms of audio."""

    def __init__(self, script: list[Word], hear: Callable[[list[Word], int], list[Word]] | None = None) -> None:
        self.script = script
        self.hear = hear or (lambda words, audio_ms: words)
        self.calls: list[tuple[int, int, str]] = []  # (offset_ms, audio_ms, prompt)
        self.phrases: list[tuple[str, ...]] = []  # the phrase hints of each decode

    def decode(self, pcm16: bytes, offset_ms: int, prompt: str = "", language: str = "en") -> Hypothesis:
        end_ms = offset_ms + len(pcm16) // BYTES_PER_MS
        self.calls.append((offset_ms, len(pcm16) // BYTES_PER_MS, prompt))
        self.phrases.append(())
        heard = [w for w in self.script if w.start_ms >= offset_ms and w.end_ms <= end_ms]
        return Hypothesis(tuple(self.hear(heard, len(pcm16) // BYTES_PER_MS)))

    def transcribe(
        self, pcm16: bytes, offset_ms: int, prompt: str = "", language: str = "en", phrases: tuple[str, ...] = ()
    ) -> Hypothesis:
        heard = self.decode(pcm16, offset_ms, prompt, language)  # it hears every word at once
        self.phrases[-1] = phrases
        return heard


def script(n: int, every_ms: int = 400) -> list[Word]:
    return [Word(f"w{i}", i * every_ms, i * every_ms + every_ms - 50) for i in range(n)]


async def run(
    decoder: ScriptedDecoder, audio_ms: int, speech: bool = True, hints: tuple[PhraseHint, ...] = ()
) -> list[EngineOutput]:
    queue = DecodeQueue(decoder)  # type: ignore[arg-type]
    queue.start()
    counters = EngineCounters()
    counters.opened()
    session = WhisperSession(queue, counters, "en", lambda: False, phrases(hints))
    outputs: list[EngineOutput] = []

    async def read() -> None:
        async for o in session.outputs():
            outputs.append(o)

    reader = asyncio.ensure_future(read())
    for _ in range(audio_ms // CHUNK_MS):
        await session.push_audio(b"\0\0" * 16 * CHUNK_MS, speech)
        await asyncio.sleep(0.002)  # the decode queue's worker runs between chunks
    await session.close()
    await asyncio.wait_for(reader, 10)
    await queue.stop()
    assert counters.sessions_active == 0
    return outputs


def final_text(outputs: list[EngineOutput]) -> list[str]:
    text: list[str] = []
    for o in outputs:
        if isinstance(o, Delta):
            text.append(o.text.strip())
        elif isinstance(o, Revision):
            text = [d.text.strip() for d in o.deltas]
    return text


async def test_interims_are_words_two_decodes_agree_on_and_the_final_extends_them() -> None:
    decoder = ScriptedDecoder(script(10))
    outputs = await run(decoder, 4000)
    deltas = [o for o in outputs if isinstance(o, Delta)]
    flushed = next(i for i, o in enumerate(outputs) if isinstance(o, Flushed))
    interims = [d.text.strip() for d in deltas if outputs.index(d) < flushed - 1]
    assert interims and interims == [f"w{i}" for i in range(len(interims))]
    assert not any(isinstance(o, Revision) for o in outputs)
    assert final_text(outputs) == [f"w{i}" for i in range(10)]
    assert isinstance(outputs[-1], Closed)


async def test_a_final_that_hears_a_said_word_otherwise_revises_the_utterance() -> None:
    # The interim decodes (every 560 ms, up to 2800 ms) hear w1 as "x1"; the final decode (3280 ms) hears it right.
    def hear(words: list[Word], audio_ms: int) -> list[Word]:
        return [Word("x1", w.start_ms, w.end_ms) if w.text == "w1" and audio_ms < 3280 else w for w in words]

    outputs = await run(ScriptedDecoder(script(8), hear=hear), 3280)
    revision = next(i for i, o in enumerate(outputs) if isinstance(o, Revision))
    assert "x1" in [o.text.strip() for o in outputs[:revision] if isinstance(o, Delta)]
    assert isinstance(outputs[revision + 1], Flushed)
    assert final_text(outputs) == [f"w{i}" for i in range(8)]


async def test_interims_go_on_after_a_said_word_is_heard_otherwise() -> None:
    # The decodes of up to 2240 ms hear "w2" as "was" (and two agree, so it is sent); later ones hear "w2":
    # the words after it are still sent as interims.
    def hear(words: list[Word], audio_ms: int) -> list[Word]:
        return [Word("was", w.start_ms, w.end_ms) if w.text == "w2" and audio_ms <= 2240 else w for w in words]

    outputs = await run(ScriptedDecoder(script(12), hear=hear), 4800)
    flushed = next(i for i, o in enumerate(outputs) if isinstance(o, Flushed))
    revision = next(i for i, o in enumerate(outputs) if isinstance(o, Revision))
    assert revision == flushed - 1
    before = [o.text.strip() for o in outputs[:revision] if isinstance(o, Delta)]
    assert "was" in before and "w6" in before
    assert final_text(outputs) == [f"w{i}" for i in range(12)]


async def test_an_utterance_of_silence_is_not_decoded() -> None:
    decoder = ScriptedDecoder(script(5))
    outputs = await run(decoder, 3000, speech=False)
    assert decoder.calls == []
    assert [type(o) for o in outputs if not isinstance(o, Progress)] == [Flushed, Closed]


async def test_a_long_utterance_is_cut_into_segments_with_the_text_so_far_as_prompt() -> None:
    words = script(80)  # 32 s of words
    decoder = ScriptedDecoder(words)
    outputs = await run(decoder, 32_000)
    assert final_text(outputs) == [w.text for w in words]
    assert max(audio_ms for _, audio_ms, _ in decoder.calls) <= SEGMENT_MS + CHUNK_MS
    offset, _, prompt = decoder.calls[-1]  # the final decode: the last segment, after the text before it
    assert offset > 0 and any(w.end_ms == offset for w in words)  # the cut is at a word's end
    assert prompt == " ".join(w.text for w in words if w.end_ms <= offset)


async def test_an_interim_decode_costs_a_few_seconds_of_audio_whatever_the_utterance() -> None:
    words = script(50)  # 20 s of words, one segment
    decoder = ScriptedDecoder(words)
    outputs = await run(decoder, 20_000)
    interims = decoder.calls[:-1]
    assert max(audio_ms for _, audio_ms, _ in interims[len(interims) // 2 :]) <= 3000
    assert decoder.calls[-1][:2] == (0, 20_000)  # the final decodes the whole utterance
    assert final_text(outputs) == [w.text for w in words]


async def test_the_queue_decodes_finals_first_and_withdrawn_jobs_get_none() -> None:
    order: list[int] = []

    class Recording:
        def decode(self, pcm16: bytes, offset_ms: int, prompt: str = "", language: str = "en") -> Hypothesis:
            order.append(offset_ms)
            return Hypothesis(())

    queue = DecodeQueue(Recording())  # type: ignore[arg-type]
    owner_a, owner_b = object(), object()
    jobs = [
        asyncio.ensure_future(queue.interim(owner_a, DecodeRequest(b"", 1))),
        asyncio.ensure_future(queue.interim(owner_b, DecodeRequest(b"", 2))),
        asyncio.ensure_future(queue.final(owner_a, DecodeRequest(b"", 3))),
    ]
    await asyncio.sleep(0)
    queue.withdraw(owner_b)
    queue.start()
    results = await asyncio.gather(*jobs)
    assert order == [3, 1]
    assert results[1] is None and results[0] == Hypothesis(())
    await queue.stop()


async def test_the_queue_reports_its_lag_on_the_injected_clock() -> None:
    now = [100.0]
    queue = DecodeQueue(ScriptedDecoder([]), workers=2, clock=lambda: now[0])  # type: ignore[arg-type]
    job = asyncio.ensure_future(queue.interim(object(), DecodeRequest(b"", 0)))
    await asyncio.sleep(0)
    now[0] = 104.5
    assert queue.lag_s() == pytest.approx(4.5)
    queue.start()
    await job
    assert queue.lag_s() == 0.0
    await queue.stop()


async def test_a_long_decode_in_progress_is_not_lag_while_a_worker_is_free() -> None:
    # Issue 45: one hold-music session's long final decode made the engine refuse every new session.
    # Admission asks lag_s: only a job that waits for a worker counts; the running decode shows in busy_s.
    now = [0.0]
    release = threading.Event()

    class Slow:
        def decode(self, pcm16: bytes, offset_ms: int, prompt: str = "", language: str = "en") -> Hypothesis:
            release.wait(10)
            return Hypothesis(())

    queue = DecodeQueue(Slow(), workers=2, clock=lambda: now[0])  # type: ignore[arg-type]
    queue.start()
    long = asyncio.ensure_future(queue.interim(object(), DecodeRequest(b"", 0)))
    while not queue.busy_s() and not long.done():
        now[0] += 1.0
        await asyncio.sleep(0.01)
    now[0] += 20.0
    assert queue.busy_s() > 20.0 and queue.lag_s() == 0.0, "one worker busy, one free: no lag"
    second = asyncio.ensure_future(queue.interim(object(), DecodeRequest(b"", 1)))
    third = asyncio.ensure_future(queue.interim(object(), DecodeRequest(b"", 2)))
    await asyncio.sleep(0.05)
    now[0] += 4.0
    assert queue.lag_s() == pytest.approx(4.0), "both workers busy: the waiting job's wait is lag"
    release.set()
    await asyncio.gather(long, second, third)
    assert queue.lag_s() == 0.0
    await queue.stop()


async def test_phrase_hints_go_to_the_final_decodes_the_strongest_first() -> None:
    decoder = ScriptedDecoder(script(10))
    hints = (PhraseHint("Ozempic", 5), PhraseHint("avoid me", -5), PhraseHint("Siobhan Kowalczyk", 15))
    await run(decoder, 10 * 400 + 1200, hints=hints)
    finals = [p for p, (_, audio_ms, _) in zip(decoder.phrases, decoder.calls, strict=True) if p]
    assert finals == [("Siobhan Kowalczyk", "Ozempic")], "the final only; a disfavoured phrase is left out"
    assert len(decoder.phrases) > 2, "interims too, without hints"


def test_a_hinted_decode_is_taken_only_where_it_gains_a_phrase_and_covers_the_rest() -> None:
    def words(text: str, every_ms: int = 400) -> list[Word]:
        return [Word(t, i * every_ms, i * every_ms + 300) for i, t in enumerate(text.split())]

    def take(plain: list[Word], hinted: list[Word], hinted_phrases: tuple[str, ...]) -> object:
        return choose(plain, hinted, gained(plain, hinted, hinted_phrases))

    plain = words("put me through to share Bun Cow whole check in accounting")
    named = words("put me through to Siobhan Kowalczyk in accounting", every_ms=600)
    assert take(plain, named, ("Siobhan Kowalczyk",)) == named
    assert take(plain, named, ("Ozempic",)) == plain, "no phrase gained"
    assert take(named, named, ("Siobhan Kowalczyk",)) == named
    cut = words("put me through to Siobhan Kowalczyk")
    assert take(plain, cut, ("Siobhan Kowalczyk",)) == plain, "stopped after the name"
    loop = words("put me through to Siobhan Kowalczyk " + "you know " * 12)
    assert take(plain, loop, ("Siobhan Kowalczyk",)) == plain, "runs on"
    assert says("siobhan kowalczyk", words("to Siobhan Kowalczyk's desk")) is False
    assert says("Siobhan Kowalczyk", words("to Siobhan, Kowalczyk.")) is True


def test_words_agree_without_case_or_punctuation_and_punctuation_joins_its_word() -> None:
    a = [Word("Ask", 0, 1), Word("not.", 1, 2)]
    b = [Word("ask", 0, 1), Word("not,", 1, 2), Word("what", 2, 3)]
    assert agreed_prefix([a, b], word_key) == 2
    assert agreed_prefix([a, b]) == 0
    assert join_punctuation([Word("Mr", 0, 5), Word(".", 5, 9), Word("Smith", 9, 12)]) == [
        Word("Mr.", 0, 9),
        Word("Smith", 9, 12),
    ]
    assert join_punctuation([Word(".", 0, 5)]) == [], "a lone period is no word"
    assert join_punctuation([Word(".", 0, 5), Word("So", 5, 9)]) == [Word("So", 5, 9)]


def test_a_transcription_goes_on_where_a_decode_ended_early() -> None:
    # Each decode hears at most 4 words (Whisper ending its text early); transcribe decodes the rest after them,
    # with the text so far as the prompt, until the audio left is under CONTINUE_AFTER_MS.
    words = script(25)  # 10 s

    class StopsEarly(ScriptedDecoder):
        def decode(
            self, pcm16: bytes, offset_ms: int, prompt: str = "", language: str = "en", *_: object
        ) -> Hypothesis:
            return Hypothesis(super().decode(pcm16, offset_ms, prompt, language).words[:4])

    decoder = StopsEarly(words)
    audio = b"\0\0" * 16 * 10_000
    hypothesis = WhisperDecoder._transcribe(decoder, audio, 0, "before", "en", "")  # type: ignore[arg-type]
    heard = [w.text for w in hypothesis.words]
    assert heard == [w.text for w in words if w.end_ms <= 10_000][: len(heard)] and len(heard) >= 20
    assert decoder.calls[1][2] == "before w0 w1 w2 w3"
    assert decoder.calls[1][0] == words[3].end_ms


def test_a_decode_that_loops_on_its_own_text_is_cut() -> None:
    def words(text: str) -> list[Word]:
        return [Word(t, i * 300, i * 300 + 200) for i, t in enumerate(text.split())]

    sentence = "The end of the video is on the right side of the video."
    twice = words(f"{sentence} {sentence}")
    assert [w.text for w in without_loops(twice, "")] == sentence.split(), "kept once"
    assert without_loops(words("end of the video."), f"{sentence} The end of the video") == [], "the prompt again"
    real = words("no, no, I said the second one, not the first one")
    assert without_loops(real, "which one") == real
    assert without_loops(words("the video"), sentence) == words("the video"), "two words may be said again"
