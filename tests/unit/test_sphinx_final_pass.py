"""The sphinx engine's final pass says it is alive, so the service's final-flush deadline waits for it."""

from __future__ import annotations

import asyncio
import time

from engine_api.outputs import EngineOutput, Flushed, Progress
from engine_sidecar.engines.engine import EngineCounters
from engine_sidecar.engines.sphinx import SphinxEngine, SphinxSession


class SlowFinalDecoder:
    """PocketSphinx's decoder interface, with a final pass (end_utt) that takes `final_s` of wall time."""

    def __init__(self, final_s: float) -> None:
        self.final_s = final_s

    def start_utt(self) -> None:
        pass

    def process_raw(self, pcm16: bytes, no_search: bool, full_utt: bool) -> None:
        pass

    def end_utt(self) -> None:
        time.sleep(self.final_s)

    def seg(self) -> list[object]:
        return []


def session_with(final_s: float, heartbeat_s: float = 0.1, limit_s: float = 10.0) -> SphinxSession:
    counters = EngineCounters()
    counters.opened()
    session = SphinxSession(SlowFinalDecoder(final_s), counters)
    session.final_pass_heartbeat_s, session.final_pass_limit_s = heartbeat_s, limit_s
    return session


async def outputs_of_flush(session: SphinxSession) -> list[EngineOutput]:
    await session.push_audio(b"\0" * 3200, speech=False)
    await session.flush(marker=7)
    seen = []
    async for out in session.outputs():
        seen.append(out)
        if isinstance(out, Flushed):
            return seen
    raise AssertionError("no Flushed")


async def test_a_long_final_pass_sends_progress_until_it_ends() -> None:
    seen = await asyncio.wait_for(outputs_of_flush(session_with(final_s=0.55)), 10)
    beats = [o for o in seen if isinstance(o, Progress)]
    assert len(beats) >= 3, seen
    assert all(b.audio_ms == 100 for b in beats)
    assert seen[-1] == Flushed(marker=7, audio_ms=100)


async def test_the_heartbeat_stops_at_its_limit_so_a_hung_decoder_still_meets_the_deadline() -> None:
    seen = await asyncio.wait_for(outputs_of_flush(session_with(final_s=0.6, limit_s=0.2)), 10)
    assert len([o for o in seen if isinstance(o, Progress)]) == 2, seen


async def test_a_quick_final_pass_sends_no_heartbeat() -> None:
    seen = await asyncio.wait_for(outputs_of_flush(session_with(final_s=0.0, heartbeat_s=2.0)), 10)
    assert not [o for o in seen if isinstance(o, Progress)], seen


async def test_a_session_opens_on_a_decoder_built_ahead_and_a_fresh_one_is_built_for_the_next() -> None:
    built: list[SlowFinalDecoder] = []

    def new_decoder() -> SlowFinalDecoder:
        built.append(SlowFinalDecoder(final_s=0.0))
        return built[-1]

    engine = SphinxEngine(model="", max_sessions=4)
    engine._new_decoder = new_decoder  # type: ignore[method-assign]
    await engine.start()
    assert len(built) == 1, "start builds the first session's decoder"
    first = await engine.open_session("a", "en-US")
    assert first._decoder is built[0]
    second = await engine.open_session("b", "en-US")
    assert second._decoder is built[1], "the spare built after the first open, never the first's decoder"
    await asyncio.sleep(0.05)
    assert len(built) == 3, "a spare is ready for the next session"
    await engine.shutdown()
