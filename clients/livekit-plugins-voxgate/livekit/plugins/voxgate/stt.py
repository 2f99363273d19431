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
  `update_options(keyterms=...)`  -> phrase_hints (from the next utterance on)

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
import weakref
from collections.abc import Sequence
from typing import Any

import grpc
from livekit import rtc
from livekit.agents import DEFAULT_API_CONNECT_OPTIONS, APIConnectOptions, LanguageCode, stt
from livekit.agents.types import NOT_GIVEN, NotGivenOr
from livekit.agents.utils import AudioBuffer, is_given

from voxgate_client import (
    AsyncSpeechClient,
    Phrase,
    ResumePolicy,
    as_phrases,
    chunks,
    error_details,
    format_error,
)
from voxgate_client.endpoint import Endpoint
from voxgate_client.responses import duration_s
from voxgate_client.v1 import speech_pb2 as pb

from .convert import chunk_size, mono_pcm, timed
from .errors import api_error
from .host import StreamHost, STTOptions
from .log import logger
from .stream import SpeechStream

__all__ = ["STT", "STTOptions", "SpeechStream"]


class STT(StreamHost):
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
        keyterms: Sequence[str | Phrase] = (),
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
            keyterms: names, products and jargon to favour (phrase hints): strings, or
                voxgate_client.Phrase with a boost. ``update_options(keyterms=...)`` replaces
                them mid-call, from each stream's next utterance on.
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
            keyterms=as_phrases(keyterms),
        )
        self._opts.stream_config()  # validates the options now
        self._endpoint = Endpoint.from_env(address, token, credentials, channel_options)
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
        return self._endpoint.address

    def _acquire_client(self) -> tuple[AsyncSpeechClient, bool]:
        """The STT's client (one gRPC channel), created on first use on the running loop; and
        whether it has carried a session before (the connection is then reused)."""
        loop = asyncio.get_running_loop()
        if self._client is None or (self._owns_client and self._client_loop is not loop):
            # A grpc.aio channel belongs to the loop it was made on: a new loop gets a new one.
            self._client = self._endpoint.async_client()
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
        keyterms: NotGivenOr[Sequence[str | Phrase]] = NOT_GIVEN,
    ) -> None:
        """Change options for the sessions opened from now on (a session keeps its language and
        endpointing); `keyterms` also replaces the phrase hints of every open stream, mid-call."""
        if is_given(language):
            self._opts.language = language
        if is_given(endpointing_silence_ms):
            self._opts.endpointing_silence_ms = endpointing_silence_ms
        if is_given(keyterms):
            self._opts.keyterms = as_phrases(keyterms)
            for stream in list(self._streams):
                stream.update_options(keyterms=keyterms)

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
        pcm = mono_pcm(frame)
        config = dataclasses.replace(opts.stream_config(), sample_rate_hz=frame.sample_rate)
        audio_s = len(pcm) / (2 * frame.sample_rate)
        client, _ = self._acquire_client()
        language_code = opts.language
        session_id = ""
        finals: list[pb.RecognitionResult] = []
        responses = client.stream(
            config,
            list(chunks(pcm, chunk_size(frame.sample_rate))),
            metadata=self._endpoint.metadata,
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
            raise api_error(e) from e
        words = [w for f in finals for w in f.words]
        data = stt.SpeechData(
            language=LanguageCode(language_code),
            text=" ".join(f.text.strip() for f in finals),
            start_time=duration_s(finals[0].start_offset) if finals else 0.0,
            end_time=duration_s(finals[-1].end_offset) if finals else 0.0,
            words=[timed(w, 0.0) for w in words] if words else None,
        )
        return stt.SpeechEvent(type=stt.SpeechEventType.FINAL_TRANSCRIPT, request_id=session_id, alternatives=[data])

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
