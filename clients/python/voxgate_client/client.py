"""gRPC clients for the voxgate Speech service: asyncio and blocking flavours.

Both send the config first, then, once the server has answered it, each audio
item (bytes, FINALIZE, KEEP_ALIVE or SetPhrases) in order, optionally paced to real time,
and half-close when the audio iterable ends; the server then flushes a final
result and an `ended` response before closing the stream. Both run the same
stream, with resume or without (voxgate_client.resume, voxgate_client.outbox).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Generator, Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import grpc
import grpc.aio

from ._proto import speech_pb2, speech_pb2_grpc
from .audio import chunk_bytes, chunks
from .config import AudioItem, StreamConfig
from .resume import ResumePolicy, resuming_stream, resuming_stream_async

__all__ = ["AsyncSpeechClient", "SpeechClient", "Transcript"]

Response = speech_pb2.StreamingRecognizeResponse
Metadata = Sequence[tuple[str, str | bytes]]
ChannelOptions = Sequence[tuple[str, Any]]

DEFAULT_CHUNK_MS = 100

# Ping the server every 20 s while a stream is open: a connection that died silently (a NAT or
# proxy that dropped it) fails within 30 s instead of hanging, and a resume can start. The
# server accepts pings every 10 s or more (more often earns a GOAWAY).
KEEPALIVE_OPTIONS: ChannelOptions = (
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.http2.max_pings_without_data", 0),
)


def _channel_options(given: ChannelOptions | None) -> list[tuple[str, Any]]:
    """The caller's options, plus the keepalive defaults it does not set itself."""
    options = list(given or ())
    names = {name for name, _ in options}
    return options + [(name, value) for name, value in KEEPALIVE_OPTIONS if name not in names]


@dataclass(frozen=True)
class Transcript:
    """The outcome of a whole session (see `SpeechClient.transcribe`)."""

    text: str  # non-empty final texts joined by spaces
    finals: tuple[speech_pb2.RecognitionResult, ...]
    session_id: str  # the last session's (see session_ids)
    end_reason: str  # the last session's, e.g. "client_end"; "" if the server sent no `ended`
    audio_duration_s: float  # audio the server processed, over all sessions
    # Every session of the stream in order: more than one when a drained session was
    # continued in a new one (ResumePolicy.reconnect_on_drain).
    session_ids: tuple[str, ...] = ()


def _policy(resume: bool | ResumePolicy) -> ResumePolicy | None:
    """The stream's resume policy; None: no resume (one connection, no retries)."""
    if isinstance(resume, ResumePolicy):
        return resume
    return ResumePolicy() if resume else None


def _as_items(audio: bytes | Iterable[AudioItem], config: StreamConfig) -> Iterable[AudioItem]:
    if isinstance(audio, (bytes, bytearray, memoryview)):
        per_chunk = chunk_bytes(config.encoding, config.sample_rate_hz, DEFAULT_CHUNK_MS)
        return chunks(bytes(audio), per_chunk)
    return audio


def _transcript(responses: Iterable[Response]) -> Transcript:
    finals: list[speech_pb2.RecognitionResult] = []
    sessions: list[str] = []
    end_reason, audio_ns = "", 0
    for r in responses:
        kind = r.WhichOneof("response")
        if kind == "started":
            if r.started.session_id not in sessions:
                sessions.append(r.started.session_id)
        elif kind == "result" and r.result.is_final:
            finals.append(r.result)
        elif kind == "ended":
            name = speech_pb2.SessionEndReason.Name(r.ended.reason)
            end_reason = name.removeprefix("SESSION_END_REASON_").lower()
            audio_ns += r.ended.audio_duration.ToNanoseconds()
    text = " ".join(f.text.strip() for f in finals if f.text.strip())
    session_id = sessions[-1] if sessions else ""
    return Transcript(text, tuple(finals), session_id, end_reason, audio_ns / 1e9, tuple(sessions))


class SpeechClient:
    """Blocking client on one gRPC channel. Use as a context manager or call close()."""

    def __init__(
        self,
        target: str,
        *,
        channel_options: ChannelOptions | None = None,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        options = _channel_options(channel_options)
        self._channel = (
            grpc.secure_channel(target, credentials, options)
            if credentials
            else grpc.insecure_channel(target, options)
        )
        self._stub = speech_pb2_grpc.SpeechStub(self._channel)

    def get_capabilities(
        self, *, timeout: float | None = None
    ) -> speech_pb2.GetCapabilitiesResponse:
        caps: speech_pb2.GetCapabilitiesResponse = self._stub.GetCapabilities(
            speech_pb2.GetCapabilitiesRequest(), timeout=timeout
        )
        return caps

    def stream(
        self,
        config: StreamConfig,
        audio: Iterable[AudioItem],
        *,
        pace: float | None = None,
        metadata: Metadata | None = None,
        timeout: float | None = None,
        resume: bool | ResumePolicy = False,
    ) -> Generator[Response, None, None]:
        """Stream `audio` and yield responses as they arrive.

        `pace`: speed factor against real time (1.0 = real time); None sends
        as fast as the channel allows. Raises grpc.RpcError when the RPC fails,
        or the exception the audio iterable raised.

        `resume`: True (or a ResumePolicy) reconnects after a dropped
        connection and continues the same session without losing or repeating
        results, and continues a session the server drains (SessionEnded
        DRAINING) in a new session: the drained one's `ended` is followed by a
        new `started`, and the new session's seq, utterance indexes and offsets
        continue the stream's (see voxgate_client.resume). FlowStatus responses
        are then enabled and yielded too. `timeout` bounds the whole stream.

        No audio is read from `audio` or sent before the server's first
        response: a refusal comes back before any of it is taken.
        """
        yield from resuming_stream(
            self._stub,
            config,
            audio,
            pace=pace,
            metadata=metadata,
            timeout=timeout,
            policy=_policy(resume),
        )

    def transcribe(
        self,
        config: StreamConfig,
        audio: bytes | Iterable[AudioItem],
        *,
        pace: float | None = None,
        metadata: Metadata | None = None,
        timeout: float | None = None,
        resume: bool | ResumePolicy = False,
    ) -> Transcript:
        """Send all of `audio` (bytes are cut into 100 ms chunks) and collect the finals."""
        items = _as_items(audio, config)
        return _transcript(
            self.stream(config, items, pace=pace, metadata=metadata, timeout=timeout, resume=resume)
        )

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncSpeechClient:
    """asyncio client on one grpc.aio channel. Use `async with` or await close()."""

    def __init__(
        self,
        target: str,
        *,
        channel_options: ChannelOptions | None = None,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        options = _channel_options(channel_options)
        self._channel = (
            grpc.aio.secure_channel(target, credentials, options)
            if credentials
            else grpc.aio.insecure_channel(target, options)
        )
        self._stub = speech_pb2_grpc.SpeechStub(self._channel)

    async def get_capabilities(
        self, *, timeout: float | None = None
    ) -> speech_pb2.GetCapabilitiesResponse:
        caps: speech_pb2.GetCapabilitiesResponse = await self._stub.GetCapabilities(
            speech_pb2.GetCapabilitiesRequest(), timeout=timeout
        )
        return caps

    async def stream(
        self,
        config: StreamConfig,
        audio: AsyncIterable[AudioItem] | Iterable[AudioItem],
        *,
        pace: float | None = None,
        metadata: Metadata | None = None,
        timeout: float | None = None,
        resume: bool | ResumePolicy = False,
    ) -> AsyncIterator[Response]:
        """Stream `audio` and yield responses as they arrive (see SpeechClient.stream, `resume`
        included).

        A plain (sync) iterable is drained on the event loop, so it must not block.
        """
        async for response in resuming_stream_async(
            self._stub,
            config,
            audio,
            pace=pace,
            metadata=metadata,
            timeout=timeout,
            policy=_policy(resume),
        ):
            yield response

    async def transcribe(
        self,
        config: StreamConfig,
        audio: bytes | AsyncIterable[AudioItem] | Iterable[AudioItem],
        *,
        pace: float | None = None,
        metadata: Metadata | None = None,
        timeout: float | None = None,
        resume: bool | ResumePolicy = False,
    ) -> Transcript:
        items = (
            _as_items(audio, config) if isinstance(audio, (bytes, bytearray, memoryview)) else audio
        )
        stream = self.stream(
            config, items, pace=pace, metadata=metadata, timeout=timeout, resume=resume
        )
        responses = [r async for r in stream]
        return _transcript(responses)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
