"""A session over multichannel audio: one ordinary Session per channel, composed.

The client's interleaved audio is split (audio/channels.py) and each part fed to a mono
Session of its own, so every channel has its own engine session, utterances and endpoints,
while the session is still one to the client: one Started, one response log with every
result and speech event tagged with its channel, one Ended, one resume token. The parts
have equal sample counts, so the channels share one clock. A finalize, keep-alive, hint
change or half-close goes to every channel. How it ends is the same whatever the channel count: the
first channel to end otherwise than by the client's end (an error, the engine lost, a cap,
idle, drain) stops the others with the same reason, and its Ended and error are the
session's, after every channel's finals. Resume works as for mono: the client's byte
offsets are whole frames, translated to each channel's bytes.

Downmix and first-channel modes are the same composition with one part (channel 0).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

import grpc
import structlog

from .. import errors, phrase_hints
from ..audio.channels import ChannelSplit
from ..audio.decode import InvalidAudio
from ..clock import Clock
from ..config import Config
from ..events import (
    AudioIn,
    ClientInput,
    Ended,
    EndReason,
    FlowReport,
    HintsUpdated,
    Notice,
    SoundEvent,
    SpeechEvent,
    Started,
)
from ..session_config import ChannelMode, SessionConfig
from ..transcript import Result
from .core import Session
from .engine_source import EngineSource
from .log import ResponseLog

log = structlog.get_logger("session")
ONCE_PER_SESSION = frozenset(  # not once per channel
    {"IDLE_WARNING", phrase_hints.IGNORED_WARNING, phrase_hints.REJECTED_WARNING}
)
FEED_DEPTH = 4  # client messages queued per channel: the slowest channel holds the client back


class _End:
    """The client's request stream ended (a half-close, or a client that vanished)."""


_END = _End()


class _Feed:
    """One channel's share of the client's requests, as the client stream its Session reads."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[ClientInput | errors.StreamError | _End] = asyncio.Queue(FEED_DEPTH)
        self._closed = False

    async def put(self, item: ClientInput | errors.StreamError | _End) -> None:
        if not self._closed:
            await self._queue.put(item)

    def close(self) -> None:
        """Its Session reads no more: drop what waits (and so free a sender blocked on a full queue)."""
        self._closed = True
        while not self._queue.empty():
            self._queue.get_nowait()

    async def items(self) -> AsyncIterator[ClientInput]:
        while True:
            item = await self._queue.get()
            if isinstance(item, _End):
                return
            if isinstance(item, errors.StreamError):
                raise item
            yield item


class ChannelSessions:
    """The Session interface the servicer uses (start, attach, consume, log, …) over one Session per channel."""

    def __init__(
        self,
        session_id: str,
        cfg: SessionConfig,
        server: Config,
        engines: EngineSource,
        clock: Clock,
        on_end: Callable[[ChannelSessions], None],
        token_prefix: str = "",
    ) -> None:
        self.session_id = session_id
        self.cfg = cfg
        self.resume_token = token_prefix + secrets.token_urlsafe(24)  # prefix: the worker that holds it
        self.started: Started | None = None
        self.log = ResponseLog()
        self._split = ChannelSplit(cfg.encoding, cfg.channels, cfg.channel_mode)
        self._limit = server.max_audio_bytes_per_message
        self._on_end = on_end
        separate = cfg.channel_mode is ChannelMode.SEPARATE
        part = replace(cfg, channels=1, encoding=self._split.output_encoding)
        self._tags = [k + 1 if separate else 0 for k in range(self._split.outputs)]
        quiet = replace(part, flow_status_interval_s=0.0)  # one clock: the first channel's FlowStatus speaks for all
        self._children = [
            Session(
                f"{session_id}-ch{tag}" if separate else session_id,
                quiet if k else part,
                server,
                engines,
                clock,
                lambda _: None,
            )
            for k, tag in enumerate(self._tags)
        ]
        self._ends: dict[int, Ended] = {}
        self._decisive: Session | None = None  # the channel whose ending is the session's
        self._pumps: set[asyncio.Task[None]] = set()
        self._attached = False
        self._ended = False

    @property
    def ended(self) -> bool:
        return self._ended

    @property
    def error(self) -> errors.StreamError | None:
        return self._decisive.error if self._decisive is not None else None

    @property
    def has_audio(self) -> bool:
        return any(c.has_audio for c in self._children)

    async def start(self) -> Started:
        """Open every channel's engine session, or none (the first refusal is raised)."""
        starts = [asyncio.ensure_future(c.start()) for c in self._children]
        try:
            await asyncio.gather(*starts)
        except BaseException:
            for task in starts:
                task.cancel()
            await asyncio.gather(*starts, return_exceptions=True)
            for child in self._children:
                if child.started is not None:
                    await child.close_now()
            raise
        first = self._children[0].started
        assert first is not None
        started = self.started = replace(first, session_id=self.session_id, resume_token=self.resume_token)
        self.log.append(started)
        for k, child in enumerate(self._children):
            pump = asyncio.ensure_future(self._pump(k, child))
            self._pumps.add(pump)
            pump.add_done_callback(self._pumps.discard)
        return started

    # -- client streams ----------------------------------------------------

    def attach(self, resume_audio_bytes: int | None, resume_last_seq: int = 0) -> None:
        if self._attached:
            raise errors.StreamError(
                grpc.StatusCode.FAILED_PRECONDITION,
                errors.SESSION_ATTACHED,
                "the session is still attached to another stream",
            )
        if resume_last_seq > self.log.last_seq:
            raise errors.invalid_config(
                "config.resume_last_seq",
                f"resume_last_seq {resume_last_seq} is beyond the last response ({self.log.last_seq}) of this session",
            )
        part_bytes = None
        if resume_audio_bytes is not None:
            if resume_audio_bytes % self._split.frame_bytes:
                raise errors.invalid_config(
                    "config.resume_audio_bytes",
                    f"resume_audio_bytes {resume_audio_bytes} is not whole frames of {self._split.frame_bytes} bytes",
                )
            part_bytes = self._split.to_output_bytes(resume_audio_bytes)
        attached: list[Session] = []
        try:
            for child in self._children:
                child.attach(part_bytes, 0)  # each channel's own log is read by _pump, never by the client
                attached.append(child)
        except errors.StreamError:
            for child in attached:
                child.detach()
            raise
        self._attached = True

    def detach(self) -> None:
        self._attached = False
        for child in self._children:
            child.detach()

    async def consume(self, inputs: AsyncIterator[ClientInput]) -> None:
        """Read the attached client's requests into every channel until it half-closes, errs, or input stops."""
        feeds = [_Feed() for _ in self._children]
        readers = [asyncio.ensure_future(c.consume(f.items())) for c, f in zip(self._children, feeds, strict=True)]
        for feed, reader in zip(feeds, readers, strict=True):
            reader.add_done_callback(lambda _, feed=feed: feed.close())  # type: ignore[misc]
        fan_out = asyncio.ensure_future(self._fan_out(inputs, feeds))
        try:
            while not fan_out.done() and (reading := [r for r in readers if not r.done()]):
                await asyncio.wait([fan_out, *reading], return_when=asyncio.FIRST_COMPLETED)
            if not fan_out.done():  # every channel stopped taking input (drain, idle, cap): read no more
                fan_out.cancel()
            await asyncio.wait([fan_out])
            await asyncio.wait(readers)
        finally:
            for task in (fan_out, *readers):
                task.cancel()
            await asyncio.gather(fan_out, *readers, return_exceptions=True)

    async def _fan_out(self, inputs: AsyncIterator[ClientInput], feeds: list[_Feed]) -> None:
        end: errors.StreamError | _End = _END
        try:
            async for msg in inputs:
                if isinstance(msg, AudioIn):
                    for feed, part in zip(feeds, self._parts(msg.data), strict=True):
                        await feed.put(AudioIn(part))
                else:
                    for feed in feeds:
                        await feed.put(msg)
        except errors.StreamError as exc:  # every channel ends with it, as a mono session would
            end = exc
        except Exception as exc:
            log.exception("session_input_failed")
            end = errors.internal(f"the server failed reading this stream: {exc!r}")
        for feed in feeds:
            await feed.put(end)

    def _parts(self, data: bytes) -> list[bytes]:
        if len(data) > self._limit:
            raise errors.StreamError(
                grpc.StatusCode.INVALID_ARGUMENT,
                errors.AUDIO_MESSAGE_TOO_LARGE,
                f"audio message of {len(data)} bytes exceeds max_audio_bytes_per_message={self._limit}",
                field="audio",
            )
        try:
            return self._split.split(data)
        except InvalidAudio as exc:
            raise errors.StreamError(
                grpc.StatusCode.INVALID_ARGUMENT, errors.INVALID_AUDIO, str(exc), field="audio"
            ) from exc

    # -- the channels' outputs → the session's ------------------------------

    async def _pump(self, k: int, child: Session) -> None:
        tag = self._tags[k]
        async for entry in child.log.read(0):
            item = entry.item
            if isinstance(item, Started):
                continue
            if isinstance(item, Ended):
                self._channel_ended(k, child, item)
                continue
            if isinstance(item, (Result, SpeechEvent, SoundEvent)):
                item = replace(item, channel=tag)
            elif isinstance(item, FlowReport):  # only the first channel reports (one clock); in the client's bytes
                item = replace(item, acked_audio_bytes=self._split.to_client_bytes(item.acked_audio_bytes))
            elif k and (isinstance(item, HintsUpdated) or (isinstance(item, Notice) and item.code in ONCE_PER_SESSION)):
                continue  # every channel's idle clock is the same one, its engine and its hints the same
            self.log.append(item)
        self._pumped()

    def _channel_ended(self, k: int, child: Session, ended: Ended) -> None:
        self._ends[k] = ended
        if self._decisive is None and (ended.reason is not EndReason.CLIENT_END or child.error is not None):
            self._decisive = child
            for other in self._children:
                other.stop_input(ended.reason)  # the others end the same way, with their finals

    def _pumped(self) -> None:
        if self._ended or any(not c.ended for c in self._children) or len(self._ends) < len(self._children):
            return
        decisive = self._children.index(self._decisive) if self._decisive is not None else 0
        ended = self._ends[decisive]
        self._ended = True
        self.log.append(Ended(ended.reason, ended.message, max(e.audio_ms for e in self._ends.values())))
        self.log.close()
        self._on_end(self)
        log.info("channels_ended", reason=ended.reason.value, channels=len(self._children))

    # -- how it ends ---------------------------------------------------------

    def stop_input(self, reason: EndReason) -> None:
        for child in self._children:
            child.stop_input(reason)

    def drain(self, within_s: float) -> None:
        """Channels recognized apart reach their endpoints at different moments: they stop at once."""
        self.stop_input(EndReason.DRAINING)

    async def abandon(self) -> None:
        self._attached = False
        for child in self._children:
            await child.abandon()
        await self._pumps_done()

    async def close_now(self) -> None:
        for child in self._children:
            await child.close_now()
        await self._pumps_done()

    async def _pumps_done(self) -> None:
        """Every channel has ended: let the pumps hand on their last outputs (no waiting on the engine)."""
        if self._pumps:
            await asyncio.gather(*self._pumps, return_exceptions=True)

    def record_metrics(self) -> None:
        for child in self._children:
            child.record_metrics()


AnySession = Session | ChannelSessions


def new_session(
    session_id: str,
    cfg: SessionConfig,
    server: Config,
    engines: EngineSource,
    clock: Clock,
    on_end: Callable[[AnySession], None],
    token_prefix: str = "",
) -> AnySession:
    """A plain Session for mono audio, the channel composition for more than one channel."""
    if cfg.channels > 1:
        return ChannelSessions(session_id, cfg, server, engines, clock, on_end, token_prefix)
    return Session(session_id, cfg, server, engines, clock, on_end, token_prefix)
