"""The engine session transport (engine_api/frames.py): a session on the sidecar's frames socket gets the engine's
outputs as the engine makes them, refusals and failures as the statuses they are, a hang-up frees the slot, and
bad bytes break nothing.

Real sockets and the sidecar's own servers (gRPC for status, frames for sessions, one servicer), in-process, on
the fake engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import resource
import struct
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from engine_api.audio import BYTES_PER_MS
from engine_api.frames import MAX_FRAME_BYTES, FrameError, frame, frames_socket, read_frame
from engine_api.outputs import Closed, EngineOutput
from engine_api.phrases import PhraseHint
from engine_api.v1 import engine_pb2 as epb
from engine_api.v1 import engine_pb2_grpc
from engine_sidecar.engines.fake import FakeEngine, FakeSession
from engine_sidecar.process.frames import FramesServer
from engine_sidecar.process.servicer import EngineServicer
from service.config import Config
from service.session.engine_link import EngineLink
from service.session.engine_source import EngineFailed, EngineFull, EngineLost, EngineRequest
from service.session.sidecar_engines import SidecarEngines
from service.sidecar import SidecarSupervisor
from tests.helpers import ROOT, voiced

CHUNK = 80 * BYTES_PER_MS


class _FailingSession(FakeSession):
    async def push_audio(self, pcm16: bytes, speech: bool) -> None:
        raise RuntimeError("the model fell over")


class _FailingEngine(FakeEngine):
    async def open_session(
        self, session_id: str, language: str, phrase_hints: tuple[PhraseHint, ...] = ()
    ) -> FakeSession:
        await super().open_session(session_id, language)
        return _FailingSession(self._script, self._counters)


class _BrokenEngine(FakeEngine):
    async def open_session(
        self, session_id: str, language: str, phrase_hints: tuple[PhraseHint, ...] = ()
    ) -> FakeSession:
        raise RuntimeError("no decoder")


@dataclass
class Sidecar:
    """One engine served as engine_sidecar/process/serving.py serves it."""

    servicer: EngineServicer
    frames: FramesServer
    server: grpc.aio.Server
    channel: grpc.aio.Channel
    stub: engine_pb2_grpc.EngineStub
    frames_path: Path

    def frames_socket(self, stub: engine_pb2_grpc.EngineStub) -> Path | None:  # the EnginePicker's part
        return self.frames_path

    async def pick(self, wait_s: float, failed: object = None) -> list[engine_pb2_grpc.EngineStub]:
        return [self.stub]

    def place(self, stub: object, link: object) -> None:
        pass

    def opened(self, stub: object, link: object) -> None:
        pass

    async def active_becomes(self, n: int) -> None:
        await until(lambda: self.servicer._active == n)


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Polls: neither the sidecar's slot count nor a link's end has an event to wait on."""
    for _ in range(int(timeout_s / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("never happened")


@pytest.fixture
async def sidecar(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Sidecar]:
    factory = getattr(request, "param", None)
    engine = factory(tmp_path) if factory is not None else FakeEngine("", max_sessions=1)
    await engine.start()
    servicer = EngineServicer(engine)
    grpc_path = tmp_path / "e.sock"
    frames = FramesServer(servicer)
    await frames.start(frames_socket(grpc_path))
    server = grpc.aio.server()
    engine_pb2_grpc.add_EngineServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix:{grpc_path}")
    await server.start()
    channel = grpc.aio.insecure_channel(f"unix:{grpc_path}")
    yield Sidecar(servicer, frames, server, channel, engine_pb2_grpc.EngineStub(channel), frames_socket(grpc_path))
    await channel.close()
    await asyncio.gather(frames.stop(1.0), server.stop(1.0))


async def open_link(sidecar: Sidecar) -> EngineLink:
    link = await SidecarEngines(sidecar).open(EngineRequest("s1", "en-US"), base_ms=0, wait_s=1)
    assert isinstance(link, EngineLink)
    return link


async def run(link: EngineLink, audio: bytes) -> list[EngineOutput]:
    for i in range(0, len(audio), CHUNK):
        await link.send_audio(audio[i : i + CHUNK], True)
    await link.send_flush(3)
    await link.send_close()
    outputs = []
    while not isinstance(out := await link.next_output(), Closed):
        outputs.append(out)
    return [*outputs, out]


async def direct(audio: bytes) -> list[EngineOutput]:
    """The same session on a fake engine driven in this process, no transport between."""
    engine = FakeEngine("", max_sessions=1)
    await engine.start()
    session = await engine.open_session("s1", "en-US")
    outputs: list[EngineOutput] = []
    collect = asyncio.create_task(_collect(session.outputs(), outputs))
    for i in range(0, len(audio), CHUNK):
        await session.push_audio(audio[i : i + CHUNK], True)
    await session.flush(3)
    await session.close()
    await collect
    await engine.shutdown()
    return outputs


async def _collect(outputs: AsyncIterator[EngineOutput], into: list[EngineOutput]) -> None:
    async for out in outputs:
        into.append(out)
        if isinstance(out, Closed):
            return


async def test_a_session_gets_the_engines_outputs_as_the_engine_makes_them(sidecar: Sidecar) -> None:
    audio = voiced(2.0)
    link = await open_link(sidecar)
    assert link.info.engine == "fake"
    received = await run(link, audio)
    await sidecar.active_becomes(0)
    await until(lambda: link.done)
    await link.cancel()
    assert len(received) > 5
    assert received == await direct(audio)


async def test_a_full_engine_refuses(sidecar: Sidecar) -> None:
    first = await open_link(sidecar)
    with pytest.raises(EngineFull, match="max_sessions"):
        await open_link(sidecar)
    await first.cancel()
    await sidecar.active_becomes(0)
    again = await open_link(sidecar)  # the slot came back with the hang-up
    await again.cancel()


@pytest.mark.parametrize("sidecar", [lambda _: _FailingEngine("", max_sessions=1)], indirect=True)
async def test_an_engine_failure_is_engine_failed_on_frames(sidecar: Sidecar) -> None:
    link = await open_link(sidecar)
    await link.send_audio(voiced(0.08), True)
    with pytest.raises(EngineFailed, match="the model fell over"):
        async with asyncio.timeout(5):
            while True:
                await link.next_output()
    await sidecar.active_becomes(0)
    assert link.done


@pytest.mark.parametrize("sidecar", [lambda _: _BrokenEngine("", max_sessions=1)], indirect=True)
async def test_an_unexpected_error_is_engine_lost(sidecar: Sidecar) -> None:
    with pytest.raises(EngineLost, match="UNKNOWN: unexpected error: RuntimeError"):
        await open_link(sidecar)
    await sidecar.active_becomes(0)


async def test_a_sidecar_that_stops_is_engine_lost_and_writes_fail(sidecar: Sidecar) -> None:
    link = await open_link(sidecar)
    await link.send_audio(voiced(0.4), True)
    await sidecar.frames.stop(0.0)  # as at SIGTERM after the grace: the session is cancelled
    with pytest.raises(EngineLost):
        async with asyncio.timeout(5):
            while True:
                await link.next_output()
    with pytest.raises(EngineLost):
        for _ in range(50):  # the kernel may take a few writes before it refuses
            await link.send_audio(voiced(0.08), True)
    await sidecar.active_becomes(0)


async def test_no_frames_socket_is_engine_lost(sidecar: Sidecar) -> None:
    sidecar.frames_path = sidecar.frames_path.with_name("nothing-here")
    with pytest.raises(EngineLost, match="frames socket"):
        await open_link(sidecar)


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x05\x00\x00",  # a cut header
        struct.pack("<I", 50) + b"short",  # a cut body
        struct.pack("<I", MAX_FRAME_BYTES + 1),  # too large
        struct.pack("<I", 3) + b"\xff\xff\xff",  # not a SessionInput
        frame(epb.SessionInput(audio=epb.AudioChunk(pcm16=b"\0\0"))),  # not an Open first
    ],
)
async def test_bytes_that_are_not_a_session_free_everything(sidecar: Sidecar, garbage: bytes) -> None:
    reader, writer = await asyncio.open_unix_connection(str(sidecar.frames_path))
    writer.write(garbage)
    await writer.drain()
    writer.write_eof()
    async with asyncio.timeout(5):
        rest = await reader.read()
    writer.close()
    if rest:  # the sidecar answered: with an Ended that says why
        assert epb.SessionOutput.FromString(rest[4:]).ended.code == "FAILED_PRECONDITION"
    await sidecar.active_becomes(0)
    link = await open_link(sidecar)  # and the next session is served
    await link.cancel()


def _frozen(tmp_path: Path) -> FakeEngine:
    script = tmp_path / "frozen.json"
    script.write_text(json.dumps({"stall_at_ms": 0}))  # the first chunk is never taken in
    return FakeEngine(str(script), max_sessions=1)


@pytest.mark.parametrize("sidecar", [_frozen], indirect=True)
async def test_a_hang_up_on_a_frozen_session_frees_the_slot(sidecar: Sidecar) -> None:
    """Its input is not being read (the engine holds the first chunk), so the end of the connection sits behind
    unread audio: the sidecar notices the hang-up anyway, as gRPC notices a cancelled call."""
    link = await open_link(sidecar)
    with contextlib.suppress(TimeoutError):  # the service's writes back up: that is the backpressure
        async with asyncio.timeout(2):
            for _ in range(1000):
                await link.send_audio(voiced(0.08), True)
    await sidecar.active_becomes(1)
    await link.cancel()  # as the service's freeze watchdog does
    await sidecar.active_becomes(0)


async def test_a_hang_up_mid_session_frees_the_slot(sidecar: Sidecar) -> None:
    reader, writer = await asyncio.open_unix_connection(str(sidecar.frames_path))
    writer.write(frame(epb.SessionInput(open=epb.Open(session_id="x", language_code="en-US", sample_rate_hz=16000))))
    writer.write(frame(epb.SessionInput(audio=epb.AudioChunk(pcm16=voiced(0.4), speech=True))))
    await writer.drain()
    body = await read_frame(reader)
    assert body is not None and epb.SessionOutput.FromString(body).WhichOneof("output") == "opened"
    await sidecar.active_becomes(1)
    writer.close()  # no Close: a hang-up
    await sidecar.active_becomes(0)


async def test_frames_read_back_and_flaws_are_frame_errors() -> None:
    reader = asyncio.StreamReader()
    msg = epb.SessionInput(audio=epb.AudioChunk(pcm16=b"\1\2" * 100, speech=True))
    reader.feed_data(frame(msg) + frame(msg)[:7])
    reader.feed_eof()
    assert await read_frame(reader) == msg.SerializeToString()
    with pytest.raises(FrameError, match="inside a frame"):
        await read_frame(reader)
    empty = asyncio.StreamReader()
    empty.feed_eof()
    assert await read_frame(empty) is None


async def test_the_service_uses_a_frames_socket_only_when_it_is_a_private_one_of_this_user(tmp_path: Path) -> None:
    grpc_path = tmp_path / "e.sock"
    supervisor = SidecarSupervisor(Config(sidecar_socket=str(grpc_path)), lambda ready: None)
    assert supervisor.frames_socket is None  # no sidecar serves frames there (an older one): gRPC
    server = await asyncio.start_unix_server(lambda r, w: None, path=str(frames_socket(grpc_path)))
    try:
        frames_socket(grpc_path).chmod(0o666)  # others may connect (or it is someone else's): not used
        assert supervisor.frames_socket is None
        frames_socket(grpc_path).chmod(0o600)
        assert supervisor.frames_socket == frames_socket(grpc_path)
    finally:
        server.close()


def _random_frames(rng: random.Random) -> list[bytes]:
    """What one connection sends: mostly a real session's frames, with garbage and cuts at random places."""
    opened = frame(epb.SessionInput(open=epb.Open(session_id="fuzz", language_code="en-US", sample_rate_hz=16000)))
    parts = [opened] if rng.random() < 0.8 else []
    for _ in range(rng.randrange(0, 12)):
        roll = rng.random()
        if roll < 0.55:
            pcm = voiced(0.08)[: rng.randrange(0, CHUNK + 1) & ~1]
            parts.append(frame(epb.SessionInput(audio=epb.AudioChunk(pcm16=pcm, speech=rng.random() < 0.7))))
        elif roll < 0.65:
            parts.append(frame(epb.SessionInput(flush=epb.Flush(marker=rng.randrange(1 << 20)))))
        elif roll < 0.72:
            parts.append(frame(epb.SessionInput(close=epb.Close())))
        elif roll < 0.80:
            parts.append(opened)  # a second Open: not an input the session takes (ignored, as on gRPC)
        elif roll < 0.88:
            parts.append(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))))  # garbage
        elif roll < 0.94:
            whole = frame(epb.SessionInput(audio=epb.AudioChunk(pcm16=voiced(0.08))))
            parts.append(whole[: rng.randrange(1, len(whole))])  # a frame cut short
        else:
            parts.append(struct.pack("<I", rng.randrange(MAX_FRAME_BYTES + 1, 1 << 32)))  # a length too large
    return parts


async def test_random_traffic_and_hang_ups_at_random_moments_leave_nothing_behind(sidecar: Sidecar) -> None:
    """Seeded: each case sends a random mix of real frames, garbage and cuts, then hangs up (a close or an abort)
    at a random moment or reads to the end. After every case: the slot is back and a real session is served."""
    rng = random.Random(20261202)
    for case in range(40):
        reader, writer = await asyncio.open_unix_connection(str(sidecar.frames_path))
        for part in _random_frames(rng):
            writer.write(part)
            if rng.random() < 0.3:
                await asyncio.sleep(rng.random() * 0.02)
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        how = rng.choice(("close", "abort", "read"))
        if how == "read":
            with contextlib.suppress(ConnectionError, TimeoutError):
                async with asyncio.timeout(0.3):
                    await reader.read()
        if how == "abort":
            writer.transport.abort()
        else:
            writer.close()
        await sidecar.active_becomes(0)
        link = await open_link(sidecar)
        outputs = await run(link, voiced(0.4))
        assert isinstance(outputs[-1], Closed), f"case {case}: {outputs[-3:]}"
        await link.cancel()
        await sidecar.active_becomes(0)


def test_each_process_raises_its_open_files_limit_to_the_hard_one() -> None:
    """A soft limit of 256 (systemd starts services with 1024) would cap a process near 120 sessions."""
    code = (
        "import resource; from engine_api.sockets import allow_open_files; "
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE); "
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard)); "
        "print(allow_open_files(), hard)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT, check=True)
    now, hard = out.stdout.split()
    assert int(now) > 256
    assert int(now) == int(hard) or int(hard) == resource.RLIM_INFINITY
