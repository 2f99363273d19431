"""gRPC clients for the voxgate Speech service: asyncio and blocking flavours.

Both send the config first, then each audio item (bytes, FINALIZE or
KEEP_ALIVE) in order, optionally paced to real time, and half-close when the
audio iterable ends; the server then flushes a final result and an `ended`
response before closing the stream.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import grpc
import grpc.aio

from ._proto import speech_pb2, speech_pb2_grpc
from .audio import chunk_bytes, chunks
from .config import AudioItem, StreamConfig, audio_item_duration_s, config_request, request_for
from .outbox import aiter_items
from .pacing import Pacer
from .responses import ends_with_ok, is_aio_failed_write
from .resume import ResumePolicy, resuming_stream, resuming_stream_async

__all__ = ["AsyncSpeechClient", "SpeechClient", "Transcript"]

Response = speech_pb2.StreamingRecognizeResponse
Request = speech_pb2.StreamingRecognizeRequest
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
    ) -> Iterator[Response]:
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
        """
        if resume:
            policy = resume if isinstance(resume, ResumePolicy) else ResumePolicy()
            yield from resuming_stream(self._stub, config, audio, pace=pace, metadata=metadata,
                                       timeout=timeout, policy=policy)
            return
        pacer = Pacer(pace)
        failure: list[Exception] = []
        stop = threading.Event()

        def requests() -> Iterator[Request]:
            # grpc drains this on its own thread and reports its errors only as
            # UNKNOWN, so keep them to re-raise in the caller's thread.
            try:
                yield config_request(config)
                for item in audio:
                    if stop.wait(pacer.delay(audio_item_duration_s(item, config))):
                        return
                    yield request_for(item)
            except Exception as e:  # not GeneratorExit: grpc closes us when the RPC ends
                failure.append(e)
                raise

        call = self._stub.StreamingRecognize(requests(), metadata=metadata, timeout=timeout)
        try:
            yield from call
        except grpc.RpcError as e:
            # grpc ends the RPC (UNKNOWN, "Exception iterating requests!")
            # when the request iterator raises; the cause is the useful part.
            if failure:
                raise failure[0] from e
            raise
        finally:
            stop.set()  # wake a pacing sleep so the request thread ends promptly
            call.cancel()  # no-op once the RPC has finished; stops it if abandoned

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


def _raise_failure(writer: asyncio.Task[None]) -> None:
    """Re-raise what made the request writer fail (e.g. the audio iterable's error)."""
    if writer.done() and not writer.cancelled() and (exc := writer.exception()) is not None:
        raise exc


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
        if resume:
            policy = resume if isinstance(resume, ResumePolicy) else ResumePolicy()
            async for response in resuming_stream_async(
                self._stub, config, audio, pace=pace, metadata=metadata, timeout=timeout,
                policy=policy,
            ):
                yield response
            return
        call = self._stub.StreamingRecognize(metadata=metadata, timeout=timeout)
        pacer = Pacer(pace)
        answered = asyncio.Event()  # see voxgate_client.outbox.SENDS_AFTER_THE_ANSWER

        async def write_requests() -> None:
            try:
                await call.write(config_request(config))
                await answered.wait()
                async for item in aiter_items(audio):
                    await asyncio.sleep(pacer.delay(audio_item_duration_s(item, config)))
                    await call.write(request_for(item))
                await call.done_writing()
            except (grpc.RpcError, asyncio.InvalidStateError):
                # A failed write means the RPC is ending (maybe its status is not in yet):
                # the reader reports that status, with its error details.
                return
            except BaseException:
                call.cancel()  # unblock the reader, which re-raises our exception
                raise

        # Keep a reference: the event loop holds tasks only weakly.
        writer = asyncio.create_task(write_requests(), name="voxgate-request-writer")
        ended_ok = False
        try:
            async for response in call:
                answered.set()
                if response.HasField("ended"):
                    ended_ok = ends_with_ok(response.ended)
                yield response
        except (grpc.RpcError, asyncio.CancelledError) as e:
            _raise_failure(writer)
            if ended_ok and isinstance(e, grpc.RpcError) and is_aio_failed_write(e):
                return  # the server ended the stream while we were still sending: a normal end
            raise
        else:
            _raise_failure(writer)
        finally:
            # Once the server has closed the stream, unsent audio is moot: stop
            # the writer even if it is waiting on a live source or a pacing sleep.
            answered.set()
            call.cancel()
            writer.cancel()
            # wait() never raises the writer's outcome, yet our own cancellation
            # still propagates (suppressing CancelledError here would eat it).
            await asyncio.wait([writer])
            if not writer.cancelled():
                writer.exception()  # already re-raised above, or moot: mark it seen

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
