"""voxgate speech-to-text for LiveKit Agents (`stt.STT` with a streaming `SpeechStream`).

One voxgate session per `SpeechStream`, over one gRPC channel per `STT` that every stream and
`recognize()` call of it shares (HTTP/2 multiplexes them: connection reuse). The stream runs
through voxgate_client's asyncio client with a resume policy, so a dropped connection is resumed
in the same session (no result lost or repeated) and a server that drains is continued in a new
session on the same address, without LiveKit seeing an error. Only what the client cannot
recover from reaches LiveKit, as an `APIError` its retry loop understands.

Event mapping (voxgate -> LiveKit):
  SpeechEvent SPEECH_STARTED      -> START_OF_SPEECH (speech_start_time: wall clock of the onset)
  interim RecognitionResult       -> INTERIM_TRANSCRIPT (the utterance's text so far)
  final RecognitionResult         -> FINAL_TRANSCRIPT (words as TimedString with their offsets)
  SpeechEvent SPEECH_ENDED        -> END_OF_SPEECH, once the utterance's final is out
  audio sent                      -> RECOGNITION_USAGE (every 5 s of audio, and at the end)
  `SpeechStream.flush()`          -> Finalize (the utterance is closed now, its final follows)

voxgate sends SPEECH_ENDED at its endpoint (after `endpointing_silence_ms` of silence), before
the utterance's final: the engine still has to finish it, and with audio backed up (after a
reconnect, an engine under load) it may still be decoding the utterance, even the next speech's
SPEECH_STARTED may come first. LiveKit's STT turn detection takes END_OF_SPEECH as the end of the
turn's transcript, so the plugin holds END_OF_SPEECH (and any speech event after it) until that
final is out; speech in which the engine heard no word has no final: its END_OF_SPEECH goes out
with the next utterance's first text, or when the session ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import time
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np
from livekit import rtc
from livekit.agents import (
    DEFAULT_API_CONNECT_OPTIONS,
    APIConnectionError,
    APIConnectOptions,
    APIError,
    APIStatusError,
    APITimeoutError,
    LanguageCode,
    stt,
)
from livekit.agents.types import NOT_GIVEN, NotGivenOr, TimedString
from livekit.agents.utils import AudioBuffer, is_given

from voxgate_client import (
    FINALIZE,
    AsyncSpeechClient,
    AudioItem,
    ResumePolicy,
    StreamConfig,
    bearer_metadata,
    error_details,
    format_error,
)
from voxgate_client.speech_order import SpeechBoundary, SpeechOrder
from voxgate_client.v1 import speech_pb2 as pb

from .log import logger

__all__ = ["STT", "STTOptions", "SpeechStream"]

DEFAULT_ADDRESS = "127.0.0.1:50051"
CHUNK_MS = 50  # audio is sent in 50 ms messages (LiveKit frames are 10 ms)
USAGE_INTERVAL_S = 5.0  # RECOGNITION_USAGE after every 5 s of audio sent

# gRPC status -> the HTTP-like status LiveKit's APIStatusError decides retries by (4xx: final,
# except 408/429/499).
_HTTP_STATUS = {
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.DATA_LOSS: 500,
    grpc.StatusCode.UNAUTHENTICATED: 401,
}
# voxgate errors after which a new session may well succeed (ErrorInfo.reason).
_RETRYABLE_REASONS = {"CAPACITY", "DRAINING", "ENGINE_UNAVAILABLE", "SESSION_NOT_FOUND", "SESSION_QUOTA"}


@dataclass
class STTOptions:
    language: str
    sample_rate: int
    interim_results: bool
    word_time_offsets: bool
    endpointing_silence_ms: int
    resume: bool | ResumePolicy

    def stream_config(self) -> StreamConfig:
        return StreamConfig(
            encoding="linear16",
            sample_rate_hz=self.sample_rate,
            language_code=self.language,
            interim_results=self.interim_results,
            word_time_offsets=self.word_time_offsets,
            endpointing_silence_ms=self.endpointing_silence_ms,
        )


class STT(stt.STT):
    def __init__(
        self,
        *,
        address: str | None = None,
        language: str = "",
        sample_rate: int = 16000,
        interim_results: bool = True,
        word_time_offsets: bool = True,
        endpointing_silence_ms: int = 0,
        resume: bool | ResumePolicy = True,
        token: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        channel_options: list[tuple[str, Any]] | None = None,
        client: AsyncSpeechClient | None = None,
    ) -> None:
        """Speech-to-text from a voxgate server.

        Args:
            address: the server, ``host:port``. Default: ``$VOXGATE_ADDRESS``, else 127.0.0.1:50051.
            language: BCP-47 hint (e.g. "en-US"); "" for the server's default. The language the
                server applies (its SessionStarted) is what the transcripts carry.
            sample_rate: the rate audio is sent at; LiveKit resamples frames to it.
            interim_results: emit INTERIM_TRANSCRIPT events.
            word_time_offsets: attach word timings to transcripts.
            endpointing_silence_ms: silence that ends an utterance; 0: the server's (800 ms).
            resume: voxgate_client's resume policy: True (the default policy), a ResumePolicy,
                or False (a dropped connection fails the stream; LiveKit's retries then open a
                new session).
            token: bearer token. Default: ``$VOXGATE_TOKEN`` (none when unset).
            credentials: gRPC channel credentials for TLS (voxgate_client.tls_credentials()).
            channel_options: extra gRPC channel options.
            client: an AsyncSpeechClient to use instead of one this STT creates (and closes);
                it must belong to the event loop the STT is used on.
        """
        super().__init__(
            capabilities=stt.STTCapabilities(
                streaming=True,
                interim_results=interim_results,
                aligned_transcript="word" if word_time_offsets else False,
                offline_recognize=True,
                manual_flush=True,
            )
        )
        self._opts = STTOptions(
            language=language,
            sample_rate=sample_rate,
            interim_results=interim_results,
            word_time_offsets=word_time_offsets,
            endpointing_silence_ms=endpointing_silence_ms,
            resume=resume,
        )
        self._opts.stream_config()  # validates the options now
        self._address = address or os.environ.get("VOXGATE_ADDRESS") or DEFAULT_ADDRESS
        token = token if token is not None else os.environ.get("VOXGATE_TOKEN", "")
        self._metadata = bearer_metadata(token) if token else None
        self._credentials = credentials
        self._channel_options = channel_options
        self._client = client
        self._owns_client = client is None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._streams_done = 0  # streams and recognitions that got their session on the channel
        self._engine: pb.EngineInfo | None = None
        self._streams = weakref.WeakSet[SpeechStream]()
        self._prewarm_task: asyncio.Task[None] | None = None

    @property
    def model(self) -> str:
        return self._engine.name if self._engine is not None else "unknown"

    @property
    def provider(self) -> str:
        return "voxgate"

    @property
    def address(self) -> str:
        return self._address

    def _acquire_client(self) -> tuple[AsyncSpeechClient, bool]:
        """The STT's client (one gRPC channel), created on first use on the running loop; and
        whether it has carried a session before (the connection is then reused)."""
        loop = asyncio.get_running_loop()
        if self._client is None or (self._owns_client and self._client_loop is not loop):
            # A grpc.aio channel belongs to the loop it was made on: a new loop gets a new one.
            self._client = AsyncSpeechClient(
                self._address, credentials=self._credentials, channel_options=self._channel_options
            )
            self._client_loop = loop
            self._streams_done = 0
        return self._client, self._streams_done > 0

    def _session_started(self, started: pb.SessionStarted) -> None:
        self._streams_done += 1
        self._engine = started.engine

    def prewarm(self) -> None:
        """Open the gRPC connection ahead of the first stream (and learn the engine's name)."""
        try:
            client, _ = self._acquire_client()
        except RuntimeError:  # no running loop: the first stream connects
            return

        async def warm() -> None:
            try:
                caps = await client.get_capabilities(timeout=10)
                self._engine = caps.engine
            except grpc.RpcError as e:
                logger.warning("voxgate prewarm failed: %s", format_error(error_details(e)))

        self._prewarm_task = asyncio.create_task(warm(), name="voxgate.STT.prewarm")

    def update_options(
        self,
        *,
        language: NotGivenOr[str] = NOT_GIVEN,
        endpointing_silence_ms: NotGivenOr[int] = NOT_GIVEN,
    ) -> None:
        """Change options for the sessions opened from now on (a session keeps its config)."""
        if is_given(language):
            self._opts.language = language
        if is_given(endpointing_silence_ms):
            self._opts.endpointing_silence_ms = endpointing_silence_ms

    def _options(self, language: NotGivenOr[str]) -> STTOptions:
        opts = dataclasses.replace(self._opts)
        if is_given(language):
            opts.language = language
        return opts

    async def _recognize_impl(
        self,
        buffer: AudioBuffer,
        *,
        language: NotGivenOr[str] = NOT_GIVEN,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
    ) -> stt.SpeechEvent:
        opts = self._options(language)
        frame = rtc.combine_audio_frames(buffer)
        pcm = _mono_pcm(frame)
        config = dataclasses.replace(opts.stream_config(), sample_rate_hz=frame.sample_rate)
        audio_s = len(pcm) / (2 * frame.sample_rate)
        per_chunk = frame.sample_rate * 2 * CHUNK_MS // 1000
        chunks = [pcm[i : i + per_chunk] for i in range(0, len(pcm), per_chunk)]
        client, _ = self._acquire_client()
        language_code = opts.language
        session_id = ""
        finals: list[pb.RecognitionResult] = []
        responses = client.stream(
            config,
            chunks,
            metadata=self._metadata,
            # The whole recognition: connecting, plus the audio at a third of real time.
            timeout=conn_options.timeout + 3 * audio_s,
            resume=opts.resume,
        )
        try:
            async with contextlib.aclosing(responses):
                async for r in responses:
                    kind = r.WhichOneof("response")
                    if kind == "started":
                        session_id = r.started.session_id
                        language_code = r.started.effective_config.language_code or language_code
                        self._session_started(r.started)
                    elif kind == "result" and r.result.is_final and r.result.text.strip():
                        finals.append(r.result)
        except grpc.RpcError as e:
            raise _api_error(e) from e
        words = [w for f in finals for w in f.words]
        data = stt.SpeechData(
            language=LanguageCode(language_code),
            text=" ".join(f.text.strip() for f in finals),
            start_time=_seconds(finals[0].start_offset) if finals else 0.0,
            end_time=_seconds(finals[-1].end_offset) if finals else 0.0,
            words=[_timed(w, 0.0) for w in words] if words else None,
        )
        return stt.SpeechEvent(
            type=stt.SpeechEventType.FINAL_TRANSCRIPT, request_id=session_id, alternatives=[data]
        )

    def stream(
        self,
        *,
        language: NotGivenOr[str] = NOT_GIVEN,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
    ) -> SpeechStream:
        stream = SpeechStream(stt=self, opts=self._options(language), conn_options=conn_options)
        self._streams.add(stream)
        return stream

    async def aclose(self) -> None:
        for stream in list(self._streams):
            await stream.aclose()
        self._streams.clear()
        if self._prewarm_task is not None:
            self._prewarm_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._prewarm_task
            self._prewarm_task = None
        if self._owns_client and self._client is not None:
            client, self._client = self._client, None
            if self._client_loop is asyncio.get_running_loop():
                await client.close()
        await super().aclose()


class SpeechStream(stt.SpeechStream):
    """One voxgate session (or several in a row: a drained server's session is continued in a
    new one) fed with the frames pushed into the stream."""

    def __init__(self, *, stt: STT, opts: STTOptions, conn_options: APIConnectOptions) -> None:
        super().__init__(stt=stt, conn_options=conn_options, sample_rate=opts.sample_rate)
        self._voxgate = stt
        self._opts = opts
        self._language = opts.language
        self._session_id = ""
        self._input_done = False
        self._order = SpeechOrder()  # END_OF_SPEECH after the utterance's final (voxgate_client.speech_order)
        self._unreported_s = 0.0  # audio sent and not yet in a RECOGNITION_USAGE event
        # The wall clock of the stream's audio: when its first frame was pushed (a track pushes
        # in real time), and how much of it earlier sessions took. Frames wait in the input
        # channel while a session starts, so the time a session reads its first frame is late.
        self._first_push_wall: float | None = None
        self._consumed_s = 0.0

    def push_frame(self, frame: rtc.AudioFrame) -> None:
        if self._first_push_wall is None:
            self._first_push_wall = time.time()
        super().push_frame(frame)

    async def _run(self) -> None:
        client, reused = self._voxgate._acquire_client()
        t0 = time.perf_counter()
        self._input_done = False
        first = True
        end_reason = pb.SESSION_END_REASON_UNSPECIFIED
        responses = client.stream(
            self._opts.stream_config(),
            self._audio(),
            metadata=self._voxgate._metadata,
            resume=self._opts.resume,
        )
        try:
            async with contextlib.aclosing(responses):
                async for r in responses:
                    if first:
                        first = False
                        self._report_connection_acquired(time.perf_counter() - t0, reused)
                    if r.HasField("ended"):
                        end_reason = r.ended.reason
                    self._on_response(r)
        except grpc.RpcError as e:
            raise _api_error(e) from e
        finally:
            self._close_speech()
            self._report_usage()
        if not self._input_done:
            # The server ended the session while LiveKit still has audio (its max duration or
            # idle timeout; a drain the client did not continue): LiveKit retries, a new session.
            reason = pb.SessionEndReason.Name(end_reason).removeprefix("SESSION_END_REASON_")
            raise APIConnectionError(f"voxgate ended the session ({reason.lower()}) mid-stream")

    async def _audio(self) -> AsyncIterator[AudioItem]:
        """LiveKit's input channel as voxgate audio items: 50 ms of 16-bit mono PCM per message,
        FINALIZE for each flush(); ends when the input ends."""
        per_chunk = self._opts.sample_rate * 2 * CHUNK_MS // 1000
        buf = bytearray()
        started = False
        async for item in self._input_ch:
            if isinstance(item, rtc.AudioFrame):
                if not started:
                    # The session's offsets count from this frame: anchor the wall clock there.
                    started = True
                    pushed = self._first_push_wall or time.time()
                    self.start_time = pushed + self._consumed_s
                self._consumed_s += item.duration
                buf += _mono_pcm(item)
                while len(buf) >= per_chunk:
                    chunk = bytes(buf[:per_chunk])
                    del buf[:per_chunk]
                    yield self._sent(chunk)
            elif isinstance(item, self._FlushSentinel):
                if buf:
                    yield self._sent(bytes(buf))
                    buf.clear()
                yield FINALIZE
        if buf:
            yield self._sent(bytes(buf))
        self._input_done = True

    def _sent(self, chunk: bytes) -> bytes:
        self._unreported_s += len(chunk) / (2 * self._opts.sample_rate)
        if self._unreported_s >= USAGE_INTERVAL_S:
            self._report_usage()
        return chunk

    def _report_usage(self) -> None:
        if self._unreported_s > 0:
            usage = stt.RecognitionUsage(audio_duration=self._unreported_s)
            self._unreported_s = 0.0
            self._emit(stt.SpeechEventType.RECOGNITION_USAGE, recognition_usage=usage)

    def _emit(self, kind: stt.SpeechEventType, **fields: Any) -> None:
        self._event_ch.send_nowait(stt.SpeechEvent(type=kind, request_id=self._session_id, **fields))

    def _on_response(self, r: pb.StreamingRecognizeResponse) -> None:
        kind = r.WhichOneof("response")
        if kind == "started":
            self._session_id = r.started.session_id
            self._language = r.started.effective_config.language_code or self._language
            self._voxgate._session_started(r.started)
        elif kind == "speech_event":
            started = r.speech_event.type == pb.SPEECH_EVENT_TYPE_SPEECH_STARTED
            offset = _seconds(r.speech_event.offset)
            self._boundaries(self._order.speech_event(started, offset))
        elif kind == "result":
            result = r.result
            text = result.text.strip()
            if not result.is_final:
                if text and self._opts.interim_results:
                    self._boundaries(self._order.interim(_seconds(result.start_offset)))
                    self._emit(stt.SpeechEventType.INTERIM_TRANSCRIPT, alternatives=[self._data(result)])
                return
            if text:
                self._emit(stt.SpeechEventType.FINAL_TRANSCRIPT, alternatives=[self._data(result)])
            self._boundaries(self._order.final())
        elif kind == "ended":
            # The session's finals are out. A drained session is continued by the client in a new
            # one (a new `started` follows); the utterance was closed at the seam either way.
            self._close_speech()
        elif kind == "warning":
            logger.warning("voxgate: %s: %s", r.warning.code, r.warning.message,
                           extra={"session_id": self._session_id})

    def _data(self, result: pb.RecognitionResult) -> stt.SpeechData:
        offset = self.start_time_offset
        return stt.SpeechData(
            language=LanguageCode(self._language),
            text=result.text.strip(),
            start_time=_seconds(result.start_offset) + offset,
            end_time=_seconds(result.end_offset) + offset,
            words=[_timed(w, offset) for w in result.words] if result.words else None,
            metadata={"session_id": self._session_id, "result_id": result.result_id,
                      "utterance_index": result.utterance_index, "revised": result.revised},
        )

    def _boundaries(self, boundaries: list[SpeechBoundary]) -> None:
        for b in boundaries:
            if b.started:
                start = self.start_time + (b.offset_s or 0.0)
                self._emit(stt.SpeechEventType.START_OF_SPEECH, speech_start_time=start)
            else:
                end = self.start_time + b.offset_s if b.offset_s is not None else None
                self._emit(stt.SpeechEventType.END_OF_SPEECH, speech_end_time=end)

    def _close_speech(self) -> None:
        """The session is over: every held event goes out, and an open speech segment ends."""
        self._boundaries(self._order.close())


def _mono_pcm(frame: rtc.AudioFrame) -> bytes:
    """A frame's 16-bit PCM, downmixed to mono (voxgate takes one channel per stream)."""
    if frame.num_channels == 1:
        return frame.data.tobytes()
    samples = np.frombuffer(frame.data, dtype=np.int16).reshape(-1, frame.num_channels)
    return samples.mean(axis=1).round().astype("<i2").tobytes()


def _seconds(d: Any) -> float:
    return float(d.seconds + d.nanos / 1e9)


def _timed(word: pb.WordInfo, offset: float) -> TimedString:
    return TimedString(
        text=word.word,
        start_time=_seconds(word.start_offset) + offset,
        end_time=_seconds(word.end_offset) + offset,
        start_time_offset=offset,
    )


def _api_error(err: grpc.RpcError) -> APIError:
    """A failed voxgate call as the APIError LiveKit's retry logic reads."""
    details = error_details(err)
    message = f"voxgate: {format_error(details)}"
    code = err.code()
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return APITimeoutError(message)
    if code == grpc.StatusCode.UNAVAILABLE or details.get("reason") in _RETRYABLE_REASONS:
        return APIConnectionError(message)
    return APIStatusError(message, status_code=_HTTP_STATUS.get(code, 500), body=details)
