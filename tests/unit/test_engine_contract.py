"""The same contract, run against every engine the sidecar can own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from bench.wer import sphinx_final
from engine_api.audio import BYTES_PER_MS
from engine_api.info import InterimStability
from engine_api.outputs import PROGRESS_EVERY_MS, Closed, Delta, EngineOutput, Flushed, Progress, Revision
from engine_sidecar.engines import create_engine
from engine_sidecar.engines.engine import Engine
from tests.engine_streams import stream
from tests.helpers import read_wav_pcm, silence, voiced, word_error_rate

CHUNK = 2560  # 80 ms
LIGHT_ENGINES = ("whisper", "sphinx", "fake")  # voxtral runs the same contract in tests/engine (needs vLLM)


def speech_for(name: str) -> bytes:
    return read_wav_pcm("go_forward.wav")[0] if name in ("sphinx", "whisper") else voiced(2.0)


async def started(name: str) -> Engine:
    engine = create_engine(name, "", max_sessions=4)
    await engine.start()
    return engine


async def drive(engine: Engine, audio: bytes) -> list[EngineOutput]:
    """80 ms chunks, Flushed(7) after the first half of them, then close."""
    half_ms = len(audio) // 2 // CHUNK * CHUNK // BYTES_PER_MS
    session = await engine.open_session("t", "en-US")
    result = await asyncio.wait_for(stream(session, audio, CHUNK // BYTES_PER_MS, flush_at_ms=half_ms - 80), 30)
    return result.outputs


@pytest.mark.parametrize("name", LIGHT_ENGINES)
async def test_outputs_flush_and_close_in_order(name: str) -> None:
    engine = await started(name)
    audio = speech_for(name) + silence(0.5)
    outputs = await drive(engine, audio)
    assert isinstance(outputs[-1], Closed)
    assert outputs[-1].audio_ms == pytest.approx(len(audio) / 32, abs=1)
    flushes = [o for o in outputs if isinstance(o, Flushed)]
    assert [f.marker for f in flushes] == [7, 0]
    deltas = [o for o in outputs if isinstance(o, Delta)]
    assert deltas, "speech must produce text"
    flush_at = outputs.index(flushes[0])
    for d in deltas:
        assert 0 <= d.start_ms <= d.end_ms <= outputs[-1].audio_ms
        if outputs.index(d) < flush_at:
            assert d.start_ms <= flushes[0].audio_ms
    assert engine.counters()["sessions_active"] == 0
    assert engine.counters()["sessions_total"] == 1


@pytest.mark.parametrize("name", LIGHT_ENGINES)
async def test_abort_ends_outputs_and_frees_the_session(name: str) -> None:
    engine = await started(name)
    session = await engine.open_session("t", "en-US")
    await session.push_audio(speech_for(name)[: CHUNK * 5], True)
    await session.abort()
    drained = [o async for o in session.outputs()]
    assert not any(isinstance(o, Closed) for o in drained)
    assert engine.counters()["sessions_active"] == 0


@pytest.mark.parametrize("name", LIGHT_ENGINES)
async def test_same_audio_same_text(name: str) -> None:
    engine = await started(name)
    audio = speech_for(name)
    first = [o for o in await drive(engine, audio) if isinstance(o, Delta)]
    second = [o for o in await drive(engine, audio) if isinstance(o, Delta)]
    assert first == second


@pytest.mark.parametrize("name", LIGHT_ENGINES)
async def test_progress_reports_the_audio_taken_in_whether_or_not_it_was_said(name: str) -> None:
    # What the service's freeze watch relies on: a pause after audio the engine has taken in is not a freeze.
    engine = await started(name)
    audio = speech_for(name) + silence(0.5)
    outputs = await drive(engine, audio)
    reports = [o.audio_ms for o in outputs if isinstance(o, Progress)]
    assert reports and reports == sorted(reports)
    assert all(b - a >= PROGRESS_EVERY_MS for a, b in zip([0, *reports], reports, strict=False))
    assert len(audio) / 32 - PROGRESS_EVERY_MS < reports[-1] <= len(audio) / 32


def utterance_texts(outputs: list[EngineOutput]) -> list[str]:
    """Each utterance's final text as the service assembles it: deltas appended, a Revision replacing them."""
    texts, text = [], ""
    for out in outputs:
        if isinstance(out, Delta):
            text += out.text
        elif isinstance(out, Revision):
            text = "".join(d.text for d in out.deltas)
        elif isinstance(out, Flushed):
            texts.append(text.strip())
            text = ""
    return texts


@pytest.mark.parametrize("name", LIGHT_ENGINES)
async def test_revisions_come_only_from_revisable_engines_right_before_a_flush(name: str) -> None:
    engine = await started(name)
    outputs = await drive(engine, speech_for(name) + silence(0.5))
    for i, out in enumerate(outputs):
        if isinstance(out, Revision):
            assert engine.info.interim_stability is not InterimStability.APPEND_ONLY
            assert isinstance(outputs[i + 1], Flushed)


@pytest.mark.parametrize("name", ["go_forward.wav", "cards_eight_of_spades.wav"])
async def test_sphinx_ends_an_utterance_with_the_decoders_own_final_hypothesis(name: str) -> None:
    engine = await started("sphinx")
    audio = read_wav_pcm(name)[0]
    session = await engine.open_session("t", "en-US")
    reader = asyncio.create_task(_collect(session.outputs()))
    for i in range(0, len(audio), CHUNK):
        await session.push_audio(audio[i : i + CHUNK], True)
    await session.close()
    assert utterance_texts(await asyncio.wait_for(reader, 30)) == [sphinx_final(audio)]


async def test_whisper_ends_an_utterance_with_one_decode_of_its_samples() -> None:
    from engine_sidecar.engines.whisper.decoder import WhisperDecoder
    from engine_sidecar.engines.whisper.model import default_source

    engine = await started("whisper")
    audio = read_wav_pcm("go_forward.wav")[0]
    session = await engine.open_session("t", "en")
    reader = asyncio.create_task(_collect(session.outputs()))
    for i in range(0, len(audio), CHUNK):
        await session.push_audio(audio[i : i + CHUNK], True)
    await session.close()
    offline = WhisperDecoder(default_source().directory, threads=1).transcribe(audio, 0)
    final = utterance_texts(await asyncio.wait_for(reader, 30))
    assert final == [" ".join(w.text for w in offline.words)]
    assert word_error_rate("go forward ten meters", final[0]) == 0  # words: the period and capital follow the CPU
    await engine.shutdown()


async def _collect(outputs: AsyncIterator[EngineOutput]) -> list[EngineOutput]:
    return [o async for o in outputs]
