"""An in-process harness for service.session: a fake clock, a fake engine, and client streams.

No subprocess, no gRPC, no real time: the session runs on the test's event loop, its
engine streams are FakeStreams (the same EngineStream interface as the real
EngineLink), and time moves only when the test calls `clock.advance`.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace

from engine_api.audio import BYTES_PER_MS
from engine_api.info import InterimStability, PositionMode
from engine_api.outputs import Closed, Delta, EngineOutput, Flushed, Progress
from engine_api.phrases import PhraseHint
from service.audio.decode import Encoding
from service.config import Config
from service.events import (
    AudioIn,
    ClientInput,
    Ended,
    FinalizeIn,
    FlowReport,
    KeepAliveIn,
    Notice,
    PhraseHintsIn,
    SessionOutput,
)
from service.session.core import Session
from service.session.engine_source import EngineFailed, EngineLost, EngineRequest, EngineStream, StreamInfo
from service.session_config import SessionConfig
from service.transcript import Result

# -- time ---------------------------------------------------------------------


class _Timer:
    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """A service.clock.Clock that moves only when told to; its callbacks run in time order."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self._timers: list[tuple[float, int, _Timer]] = []
        self._order = itertools.count()

    def monotonic(self) -> float:
        return self.now

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> _Timer:
        timer = _Timer(self.now + max(delay_s, 0.0), callback)
        heapq.heappush(self._timers, (timer.when, next(self._order), timer))
        return timer

    def pending(self) -> list[float]:
        """When the callbacks still to come are due."""
        return sorted(t.when for _, _, t in self._timers if not t.cancelled)

    async def advance(self, seconds: float) -> None:
        """Move time on by `seconds`, running each callback at its time and letting the session act on it."""
        target = self.now + seconds
        await settle()
        while self._timers and self._timers[0][0] <= target:
            _, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self.now = max(self.now, timer.when)
            timer.callback()
            await settle()
        self.now = target
        await settle()


async def settle() -> None:
    """Run the event loop until nothing is ready to run: everything left waits for the clock or the test."""
    loop = asyncio.get_running_loop()
    for _ in range(10_000):
        await asyncio.sleep(0)
        if not loop._ready:  # type: ignore[attr-defined]  # asyncio's run queue: empty = quiescent
            return
    raise AssertionError("the event loop never went quiet: something spins")


def real_time_timers() -> list[asyncio.TimerHandle]:
    """Callbacks scheduled on the event loop's own (real) clock, e.g. by asyncio.wait_for or asyncio.sleep."""
    scheduled: list[asyncio.TimerHandle] = asyncio.get_running_loop()._scheduled  # type: ignore[attr-defined]
    return [h for h in scheduled if not h.cancelled()]


# -- the engine ---------------------------------------------------------------


class FakeStream:
    """One engine session: it answers each audio chunk with a word stamped with that chunk's session time
    (" w<start_ms>"), a flush with Flushed, a close with Closed, unless told to freeze."""

    def __init__(self, base_ms: int, answering: bool) -> None:
        self.base_ms = base_ms
        self.answering = answering
        self.received: list[str] = []  # "audio <start>-<end>", "flush <marker>", "close" in session time
        self.cancelled = False
        self.write_gate = asyncio.Event()  # cleared: writes wait (the engine's flow control)
        self.write_gate.set()
        self._audio_ms = base_ms
        self._outputs: asyncio.Queue[EngineOutput | BaseException] = asyncio.Queue()
        self._broken: BaseException | None = None

    @property
    def info(self) -> StreamInfo:
        return StreamInfo("fake", "fake-model", PositionMode.NONE, "", InterimStability.APPEND_ONLY)

    # controls
    def emit(self, out: EngineOutput) -> None:
        self._outputs.put_nowait(out)

    def lose(self) -> None:
        """The sidecar died: the stream breaks."""
        self._break(EngineLost("sidecar gone"))

    def fail(self) -> None:
        """The engine failed this session (ABORTED)."""
        self._break(EngineFailed("engine error"))

    def _break(self, exc: BaseException) -> None:
        self._broken = exc
        self._outputs.put_nowait(exc)

    # EngineStream
    async def next_output(self) -> EngineOutput:
        item = await self._outputs.get()
        if isinstance(item, BaseException):
            raise item
        return item

    async def send_audio(self, pcm16: bytes, speech: bool) -> None:
        await self._write()
        start, self._audio_ms = self._audio_ms, self._audio_ms + len(pcm16) // BYTES_PER_MS
        self.received.append(f"audio {start}-{self._audio_ms}")
        if self.answering:
            self.emit(Delta(f" w{start}", start, self._audio_ms))
            self.emit(Progress(self._audio_ms))

    async def send_flush(self, marker: int) -> None:
        await self._write()
        self.received.append(f"flush {marker}")
        if self.answering:
            self.emit(Flushed(marker, self._audio_ms))

    async def send_phrase_hints(self, hints: tuple[PhraseHint, ...]) -> None:
        await self._write()
        self.received.append("hints " + ",".join(h.text for h in hints))

    async def send_close(self) -> None:
        await self._write()
        self.received.append("close")
        if self.answering:
            self.emit(Closed(self._audio_ms))

    async def cancel(self) -> None:
        self.cancelled = True

    async def _write(self) -> None:
        if self._broken is not None:
            raise EngineLost(f"write failed: {self._broken!r}")
        await self.write_gate.wait()


class FakeEngine:
    """The engine source: opens FakeStreams, or refuses with `refusal` while it is set."""

    def __init__(self) -> None:
        self.streams: list[FakeStream] = []
        self.refusal: Exception | None = None
        self.answering = True  # new streams answer (False: they take audio in silence, as a frozen engine)
        self.opens = 0
        self.requests: list[EngineRequest] = []  # what each open was asked for

    @property
    def stream(self) -> FakeStream:
        return self.streams[-1]

    async def open(
        self, request: EngineRequest, base_ms: int, wait_s: float, failed: EngineStream | None = None
    ) -> FakeStream:
        self.opens += 1
        self.requests.append(request)
        if self.refusal is not None:
            raise self.refusal
        stream = FakeStream(base_ms, self.answering)
        self.streams.append(stream)
        return stream


# -- the client ---------------------------------------------------------------

CHUNK_BYTES = 80 * BYTES_PER_MS  # 80 ms of 16 kHz LINEAR16


def silence(ms: int) -> bytes:
    return b"\0" * (ms * BYTES_PER_MS)


class Client:
    """One client stream on the session, run as SpeechServicer.run_session runs it."""

    def __init__(self, session: Session, after_seq: int = 0) -> None:
        self.session = session
        self.responses: list[SessionOutput] = []
        self.seqs: list[int] = []
        self.done = False
        self._requests: asyncio.Queue[ClientInput | None] = asyncio.Queue()
        self._consumer = asyncio.ensure_future(session.consume(self._inputs()))
        self._reader = asyncio.ensure_future(self._read(after_seq))

    async def _inputs(self) -> AsyncIterator[ClientInput]:
        while (msg := await self._requests.get()) is not None:
            yield msg

    async def _read(self, after_seq: int) -> None:
        async for entry in self.session.log.read(after_seq):
            self.seqs.append(entry.seq)
            self.responses.append(entry.item)
        self.done = True

    def audio(self, data: bytes) -> None:
        self._requests.put_nowait(AudioIn(data))

    def finalize(self) -> None:
        self._requests.put_nowait(FinalizeIn())

    def keep_alive(self) -> None:
        self._requests.put_nowait(KeepAliveIn())

    def hints(self, *texts: str, rejected: str = "") -> None:
        """Replace the phrase hints (each with boost 10), or send a replacement the edge rejected."""
        self._requests.put_nowait(PhraseHintsIn(tuple(PhraseHint(t, 10.0) for t in texts), rejected))

    def half_close(self) -> None:
        self._requests.put_nowait(None)

    async def hang_up(self) -> None:
        """The RPC is cancelled: the session waits for a resume, or ends at once if it has no audio."""
        self._reader.cancel()
        self._consumer.cancel()
        await asyncio.gather(self._reader, self._consumer, return_exceptions=True)
        if self.session.has_audio:
            self.session.detach()
        else:
            await self.session.abandon()

    # what it got
    @property
    def ended(self) -> Ended | None:
        last = self.responses[-1] if self.responses else None
        return last if isinstance(last, Ended) else None

    def finals(self) -> list[Result]:
        return [r for r in self.responses if isinstance(r, Result) and r.is_final]

    def notices(self) -> list[str]:
        return [r.code for r in self.responses if isinstance(r, Notice)]

    def of_flow(self) -> list[FlowReport]:
        return [r for r in self.responses if isinstance(r, FlowReport)]


# -- a session ----------------------------------------------------------------

SERVER = Config(
    engine="fake",
    resume_window_s=30,
    idle_timeout_s=30,
    final_flush_timeout_s=10,
    freeze_timeout_s=15,
    engine_recovery_timeout_s=60,
)
SESSION = SessionConfig(
    encoding=Encoding.LINEAR16,
    sample_rate_hz=16000,
    language_code="en-US",
    interim_results=True,
    word_time_offsets=True,
    endpointing_silence_ms=800,
    max_duration_s=0.0,
    idle_timeout_s=30.0,
    flow_status_interval_s=0.0,
)


@dataclass
class Harness:
    clock: FakeClock
    engine: FakeEngine
    session: Session
    ended: list[Session] = field(default_factory=list)  # the session's on_end calls

    def client(self, after_seq: int = 0) -> Client:
        return Client(self.session, after_seq)

    def resume(self, audio_bytes: int | None, last_seq: int) -> Client:
        self.session.attach(audio_bytes, last_seq)
        return Client(self.session, last_seq)


async def start(server: Config = SERVER, **session: object) -> tuple[Harness, Client]:
    """A started session with its first client attached (as a new SpeechServicer session is)."""
    clock, engine = FakeClock(), FakeEngine()
    ended: list[Session] = []
    cfg = replace(SESSION, **session)  # type: ignore[arg-type]
    s = Session("s1", cfg, server, engine, clock, ended.append)
    await s.start()
    s.attach(None)
    harness = Harness(clock, engine, s, ended)
    client = harness.client()
    await settle()
    return harness, client
