"""Phrase hints replaced mid-call, in the sidecar's engines: from the next utterance on, never the one in progress."""

from __future__ import annotations

import asyncio

from engine_api.outputs import Delta
from engine_api.phrases import PhraseHint
from engine_sidecar.engines.engine import EngineCounters
from engine_sidecar.engines.fake import FakeScript, FakeSession
from engine_sidecar.engines.whisper.decode_queue import DecodeQueue
from engine_sidecar.engines.whisper.engine import WhisperSession
from tests.unit.test_whisper_streaming import CHUNK_MS, ScriptedDecoder, script

SPEECH = b"\0\0" * 16 * CHUNK_MS
OLD = (PhraseHint("Ozempic", 10),)
NEW = (PhraseHint("Siobhan Kowalczyk", 10),)


async def _words(session: FakeSession) -> list[str]:
    """The words of a closed session (its outputs end after Closed)."""
    return [o.text.strip() async for o in session.outputs() if isinstance(o, Delta)]


async def test_the_fake_engine_takes_new_hints_after_the_utterance_in_progress() -> None:
    counters = EngineCounters()
    counters.opened()
    session = FakeSession(FakeScript(word_ms=400), counters, OLD)
    await session.push_audio(SPEECH * 5, True)  # one word, and the utterance goes on
    await session.set_phrase_hints(NEW)
    await session.push_audio(SPEECH * 5, True)
    await session.flush(1)  # the utterance ends: the new hints apply from here
    await session.push_audio(SPEECH * 10, True)
    await session.set_phrase_hints(())  # cleared mid-utterance: the old vocabulary back after it
    await session.close()
    assert await _words(session) == ["Ozempic", "Ozempic", "Siobhan", "Kowalczyk"]


async def test_hints_changed_between_utterances_apply_at_once() -> None:
    counters = EngineCounters()
    counters.opened()
    session = FakeSession(FakeScript(word_ms=400), counters, OLD)
    await session.push_audio(SPEECH * 5, False)  # silence only: no utterance in progress
    await session.set_phrase_hints(NEW)
    await session.push_audio(SPEECH * 5, True)
    await session.close()
    assert await _words(session) == ["Siobhan"]


async def test_whisper_decodes_the_utterance_in_progress_with_the_hints_it_began_with() -> None:
    decoder = ScriptedDecoder(script(20))
    queue = DecodeQueue(decoder)  # type: ignore[arg-type]
    queue.start()
    counters = EngineCounters()
    counters.opened()
    session = WhisperSession(queue, counters, "en", lambda: False, ("Ozempic",))
    reader = asyncio.ensure_future(_read_all(session))
    for k in range(40):
        if k == 10:
            await session.set_phrase_hints(NEW)  # mid-utterance
        await session.push_audio(SPEECH, True)
        await asyncio.sleep(0.002)
    await session.flush(1)
    await session.set_phrase_hints(NEW + (PhraseHint("Voxgate", 20),))  # between utterances: at once
    for _ in range(20):
        await session.push_audio(SPEECH, True)
        await asyncio.sleep(0.002)
    await session.close()
    await asyncio.wait_for(reader, 10)
    await queue.stop()
    finals = [p for p in decoder.phrases if p]
    assert finals == [("Ozempic",), ("Voxgate", "Siobhan Kowalczyk")], "interims have none; finals by utterance"


async def _read_all(session: WhisperSession) -> None:
    async for _ in session.outputs():
        pass
