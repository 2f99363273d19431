"""A multichannel session (service/session/channels.py), in-process on a fake clock and a fake engine:
one engine stream per channel, one clock, and every way it ends the same as a mono session's."""

from __future__ import annotations

from dataclasses import replace

import grpc
import numpy as np
import pytest

from service import errors
from service.events import Ended, EndReason, SpeechEvent, Started
from service.session.channels import ChannelSessions
from service.session.core import HALF_CLOSE_GRACE_S
from service.session.engine_source import EngineFull, EngineRequest, EngineStream
from service.session_config import ChannelMode
from tests.helpers import voiced
from tests.session.harness import SERVER, SESSION, Client, FakeClock, FakeEngine, FakeStream, settle, silence


async def start_channels(
    channels: int = 2, engine: FakeEngine | None = None, **cfg: object
) -> tuple[ChannelSessions, FakeEngine, FakeClock, Client, list[ChannelSessions]]:
    clock, engine = FakeClock(), engine or FakeEngine()
    ended: list[ChannelSessions] = []
    session = ChannelSessions(
        "s1",
        replace(SESSION, channels=channels, **cfg),  # type: ignore[arg-type]
        SERVER,
        engine,
        clock,
        ended.append,
    )
    await session.start()
    session.attach(None)
    client = Client(session)  # type: ignore[arg-type]  # the same interface as a Session
    await settle()
    return session, engine, clock, client, ended


def stereo(ms: int) -> bytes:
    """Two channels of `ms` each: channel 1 silent, channel 2 a ramp (so the two are told apart)."""
    n = len(silence(ms)) // 2
    return np.stack([np.zeros(n, np.int16), np.arange(n, dtype=np.int16)], axis=1).astype("<i2").tobytes()


async def test_each_channel_is_an_engine_session_on_one_clock_and_a_half_close_ends_all() -> None:
    session, engine, clock, c, ended = await start_channels()
    assert len(engine.streams) == 2 and isinstance(c.responses[0], Started)
    assert c.responses[0].resume_token == session.resume_token and c.responses[0].session_id == "s1"
    c.audio(stereo(240))
    c.half_close()
    await clock.advance(HALF_CLOSE_GRACE_S)
    for stream in engine.streams:
        assert stream.received == ["audio 0-80", "audio 80-160", "audio 160-240", "close"]
    finals = {(f.channel, f.text) for f in c.finals()}
    assert finals == {(1, "w0 w80 w160"), (2, "w0 w80 w160")}
    assert len({f.result_id for f in c.finals()}) == 2
    assert c.ended == Ended(EndReason.CLIENT_END, "", 240)
    assert sum(isinstance(r, Ended) for r in c.responses) == 1 and ended == [session] and session.error is None


async def test_a_finalize_applies_to_every_channel() -> None:
    session, engine, clock, c, _ = await start_channels()
    c.audio(stereo(160))
    c.finalize()
    await settle()
    assert all(s.received[-1] == "flush 1" for s in engine.streams)
    assert sorted(f.channel for f in c.finals()) == [1, 2]


async def test_an_engine_failure_on_one_channel_ends_all_with_that_error_and_every_final() -> None:
    session, engine, clock, c, ended = await start_channels()
    c.audio(stereo(160))
    await settle()
    engine.streams[1].fail()
    await settle()
    assert c.ended == Ended(EndReason.ERROR, "the engine failed on this session", 160)  # as a mono session's
    assert sorted((f.channel, f.text) for f in c.finals()) == [(1, "w0 w80"), (2, "w0 w80")]
    assert session.error is not None and session.error.reason == errors.ENGINE_ERROR
    assert engine.streams[0].received[-1] == "close" and ended == [session]


async def test_a_cap_ends_every_channel_with_its_finals() -> None:
    session, engine, clock, c, _ = await start_channels(max_duration_s=0.3)
    c.audio(stereo(400))
    await settle()
    assert c.ended == Ended(EndReason.MAX_DURATION, "", 300)
    assert sorted(f.channel for f in c.finals()) == [1, 2]
    assert all(s.received[-2:] == ["audio 240-300", "close"] for s in engine.streams)


async def test_audio_not_in_whole_frames_ends_every_channel_with_invalid_audio() -> None:
    session, engine, clock, c, _ = await start_channels(channels=3)
    c.audio(b"\0" * 6 * 10)  # ten frames of three LINEAR16 channels
    c.audio(b"\0" * 8)
    await settle()
    assert c.ended is not None and c.ended.reason is EndReason.ERROR
    assert session.error is not None and (session.error.code, session.error.reason) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        errors.INVALID_AUDIO,
    )


async def test_speech_events_carry_their_channel() -> None:
    session, engine, clock, c, _ = await start_channels()
    speech = np.frombuffer(voiced(1.0) + silence(1000), dtype="<i2")  # speech on the second channel only
    for i in range(0, len(speech), 1600):
        part = speech[i : i + 1600]
        c.audio(np.stack([np.zeros_like(part), part], axis=1).astype("<i2").tobytes())
    await settle()
    events = [(e.channel, e.started) for e in c.responses if isinstance(e, SpeechEvent)]
    assert events == [(2, True), (2, False)]


async def test_idle_and_drain_end_all_as_one() -> None:
    session, engine, clock, c, _ = await start_channels(idle_timeout_s=10.0)
    await clock.advance(5.0)
    assert c.notices() == ["IDLE_WARNING"], "one warning, not one per channel"
    await clock.advance(5.0)
    assert c.ended is not None and c.ended.reason is EndReason.IDLE_TIMEOUT


class RefusesTheSecond(FakeEngine):
    async def open(
        self, request: EngineRequest, base_ms: int, wait_s: float, failed: EngineStream | None = None
    ) -> FakeStream:
        if self.opens == 1:
            self.opens += 1
            raise EngineFull("no slot")
        return await super().open(request, base_ms, wait_s, failed)


async def test_every_channel_starts_or_none() -> None:
    engine = RefusesTheSecond()
    with pytest.raises(errors.StreamError):
        await start_channels(engine=engine)
    assert len(engine.streams) == 1 and engine.streams[0].cancelled, "the channel that started is closed again"


async def test_resume_translates_frames_to_each_channels_bytes() -> None:
    session, engine, clock, c, _ = await start_channels()
    c.audio(stereo(160))
    await settle()
    await c.hang_up()
    with pytest.raises(errors.StreamError) as err:
        session.attach(2, 0)  # half a frame
    assert err.value.field == "config.resume_audio_bytes"
    session.attach(len(stereo(80)), c.seqs[-1])
    again = Client(session, c.seqs[-1])  # type: ignore[arg-type]
    again.audio(stereo(160)[len(stereo(80)) :])  # resent from the acknowledged offset: nothing twice
    again.half_close()
    await clock.advance(HALF_CLOSE_GRACE_S)
    assert all(s.received[:3] == ["audio 0-80", "audio 80-160", "close"] for s in engine.streams)


async def test_downmix_is_one_engine_session_untagged() -> None:
    session, engine, clock, c, _ = await start_channels(channel_mode=ChannelMode.DOWNMIX)
    c.audio(stereo(160))
    c.half_close()
    await clock.advance(HALF_CLOSE_GRACE_S)
    assert len(engine.streams) == 1
    assert [(f.channel, f.text) for f in c.finals()] == [(0, "w0 w80")]


async def test_flow_status_acknowledges_the_clients_interleaved_bytes_once() -> None:
    session, engine, clock, c, _ = await start_channels(channels=3, flow_status_interval_s=0.1)
    c.audio(b"\0" * 6 * 1600)  # 100 ms of three LINEAR16 channels
    await clock.advance(0.1)
    reports = c.of_flow()
    assert len(reports) == 2, "one report per interval (the first at once), not one per channel"
    assert (reports[-1].acked_audio_bytes, reports[-1].acked_audio_ms) == (6 * 1600, 100)
