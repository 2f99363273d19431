"""voxgate speech-to-text as a Pipecat `STTService` (a frame processor).

Input audio frames go to one voxgate streaming session; its results come back as
`InterimTranscriptionFrame` and `TranscriptionFrame` (`finalized`: each voxgate final closes its
utterance), with the word timings and session details in the frame's `result`
(`VoxgateResult`). The session runs through voxgate_client's asyncio client with a resume
policy: a dropped connection is resumed in the same session (no result lost or repeated), and a
server that drains is continued in a new session on the same address. Anything the client cannot
recover from is pushed upstream as an `ErrorFrame` and a new session is opened after a pause
(the audio meanwhile is kept, up to `max_buffer_s`), unless the server refused the session
itself (a bad config or token: the service stops, unusable).

Speech events: voxgate's SPEECH_STARTED / SPEECH_ENDED call the `on_speech_started` /
`on_speech_stopped` event handlers (with the offset in seconds of the stream's audio) and, with
`vad_events=True`, broadcast `ProposedUserStartedSpeakingFrame` /
`ProposedUserStoppedSpeakingFrame` for Pipecat's external turn strategies. voxgate sends
SPEECH_ENDED at its endpoint, before the utterance's final: the engine still has to finish it,
and with audio backed up (after a reconnect, an engine under load) even the next speech's
SPEECH_STARTED may come first. The stop (and any speech event after it) is held until that final
has been pushed, so that it follows the transcript it closes; speech in which the engine heard no
word has no final: its stop goes out with the next utterance's first text, or when the session
ends.

A `VADUserStoppedSpeakingFrame` (Pipecat's own VAD) sends voxgate a Finalize: the utterance is
closed at once and its final comes back without waiting for voxgate's endpointing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any

import grpc
from loguru import logger
from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    Frame,
    InterimTranscriptionFrame,
    ProposedUserStartedSpeakingFrame,
    ProposedUserStoppedSpeakingFrame,
    StartFrame,
    TranscriptionFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.settings import STTSettings
from pipecat.services.stt_service import STTService
from pipecat.transcriptions.language import Language
from pipecat.utils.errors import ErrorCategory
from pipecat.utils.time import time_now_iso8601
from pipecat.utils.tracing.service_decorators import traced_stt

from voxgate_client import (
    FINALIZE,
    AsyncSpeechClient,
    AudioItem,
    Phrase,
    ResumePolicy,
    SetPhrases,
    StreamConfig,
    as_phrases,
    error_details,
    format_error,
)
from voxgate_client.endpoint import Endpoint
from voxgate_client.responses import duration_s
from voxgate_client.speech_order import SpeechBoundary, SpeechOrder
from voxgate_client.v1 import speech_pb2 as pb

from .audio_queue import AudioQueue, End, Rotate
from .results import VoxgateResult, VoxgateWord, pipecat_language, voxgate_result
from .settings import VoxgateSTTSettings, keyterm_phrases

__all__ = ["VoxgateResult", "VoxgateSTTService", "VoxgateSTTSettings", "VoxgateWord"]

# Speech end -> final transcript, p99: voxgate's endpoint fires after its endpointing silence
# (800 ms by default) and the final follows the engine's flush; a VADUserStoppedSpeakingFrame
# finalizes at once. An estimate for the embedded engine on a CPU: measure your deployment.
VOXGATE_TTFS_P99 = 1.0

# Refusals a new session would meet again: the service stops instead of retrying.
_PERMANENT = {
    grpc.StatusCode.INVALID_ARGUMENT: ErrorCategory.INVALID_REQUEST,
    grpc.StatusCode.UNAUTHENTICATED: ErrorCategory.AUTHENTICATION,
    grpc.StatusCode.PERMISSION_DENIED: ErrorCategory.AUTHORIZATION,
    grpc.StatusCode.UNIMPLEMENTED: ErrorCategory.INVALID_REQUEST,
}


class VoxgateSTTService(STTService):
    """Streaming speech-to-text from a voxgate server.

    Event handlers (besides STTService's on_connected / on_disconnected /
    on_connection_error): ``on_speech_started(service, offset_s)``,
    ``on_speech_stopped(service, offset_s)``, ``on_session_started(service, session_id)``.
    """

    def __init__(
        self,
        *,
        address: str | None = None,
        language: Language | str | None = None,
        interim_results: bool = True,
        word_time_offsets: bool = True,
        endpointing_silence_ms: int = 0,
        resume: bool | ResumePolicy = True,
        keyterms: Sequence[str | Phrase] = (),
        vad_events: bool = False,
        finalize_on_vad_stop: bool = True,
        token: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        channel_options: list[tuple[str, Any]] | None = None,
        client: AsyncSpeechClient | None = None,
        max_buffer_s: float = 30.0,
        retry_delay_s: float = 1.0,
        sample_rate: int | None = None,
        ttfs_p99_latency: float | None = VOXGATE_TTFS_P99,
        **kwargs: Any,
    ) -> None:
        """Args:
        address: the server, ``host:port``. Default: ``$VOXGATE_ADDRESS``, else 127.0.0.1:50051.
        language: BCP-47 hint; None or "" for the server's default. Frames carry the language
            the server applied (its SessionStarted). Changeable at run time with
            ``STTUpdateSettingsFrame(delta=STTSettings(language=...))``: the current session
            then ends with its finals and the next one uses it.
        interim_results: push InterimTranscriptionFrames.
        word_time_offsets: word timings in each frame's ``result.words``.
        endpointing_silence_ms: silence that ends an utterance; 0: the server's (800 ms).
        resume: voxgate_client's resume policy: True (its default), a ResumePolicy, or False.
        keyterms: names, products and jargon to favour (phrase hints): strings, or
            voxgate_client.Phrase with a boost. Replaced mid-call with
            ``STTUpdateSettingsFrame(delta=VoxgateSTTSettings(keyterms=[...]))``: the session
            uses them from its next utterance on.
        vad_events: broadcast ProposedUserStarted/StoppedSpeakingFrame from voxgate's speech
            events (for ExternalUserTurnStartStrategy / ExternalUserTurnStopStrategy).
        finalize_on_vad_stop: on VADUserStoppedSpeakingFrame, ask voxgate for the final now.
        token: bearer token. Default: ``$VOXGATE_TOKEN`` (none when unset).
        credentials: gRPC channel credentials for TLS (voxgate_client.tls_credentials()).
        channel_options: extra gRPC channel options.
        client: an AsyncSpeechClient to share (e.g. between services); it is not closed here.
        max_buffer_s: audio kept while no session takes it (the server is unreachable).
        retry_delay_s: pause before a new session after one failed.
        sample_rate: input rate; None: the pipeline's (StartFrame's audio_in_sample_rate).
        ttfs_p99_latency: speech end -> final transcript p99 (Pipecat's turn strategies).
        """
        super().__init__(
            sample_rate=sample_rate,
            ttfs_p99_latency=ttfs_p99_latency,
            settings=VoxgateSTTSettings(model=None, language=language or "", keyterms=list(keyterms)),
            **kwargs,
        )
        self._endpoint = Endpoint.from_env(address, token, credentials, channel_options)
        self._client = client
        self._owns_client = client is None
        self._interim_results = interim_results
        self._word_time_offsets = word_time_offsets
        self._endpointing_silence_ms = endpointing_silence_ms
        self._resume = resume
        self._vad_events = vad_events
        self._finalize_on_vad_stop = finalize_on_vad_stop
        self._max_buffer_s = max_buffer_s
        self._retry_delay_s = retry_delay_s
        StreamConfig(
            encoding="linear16",
            sample_rate_hz=16000,  # validates the options now
            endpointing_silence_ms=endpointing_silence_ms,
            phrases=as_phrases(keyterms),
        )

        self._queue: AudioQueue | None = None
        self._sessions_task: asyncio.Task[None] | None = None
        self._input_ended = False
        self._ending = False
        # Audio (seconds) sent in the sessions before the current one: a session's offsets count
        # from its own start, the frames' from the start of the service's audio.
        self._base_s = 0.0
        self._sent_bytes = 0  # in the current session
        self._session_id = ""
        self._language: str = ""
        self._order = SpeechOrder()  # the stop after the utterance's final (voxgate_client.speech_order)

        self._register_event_handler("on_speech_started")
        self._register_event_handler("on_speech_stopped")
        self._register_event_handler("on_session_started")

    def can_generate_metrics(self) -> bool:
        return True

    def language_to_service_language(self, language: Language) -> str | None:
        return str(language.value)

    # -- lifecycle -----------------------------------------------------------

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        if self._client is None:
            self._client = self._endpoint.async_client()
        self._queue = AudioQueue(int(self._max_buffer_s * self.sample_rate * 2))
        self._input_ended = self._ending = False
        self._sessions_task = self.create_task(self._sessions(), name="voxgate_sessions")

    async def stop(self, frame: EndFrame) -> None:
        """Half-close the session and push its last finals, then stop."""
        self._ending = True  # a failing session is not retried any more
        if self._queue is not None and self._sessions_task is not None:
            self._queue.put(End())
            try:
                await asyncio.wait_for(asyncio.shield(self._sessions_task), timeout=30)
            except TimeoutError:
                logger.warning(f"{self}: the session did not end within 30 s of the EndFrame")
        await self._stop_sessions()
        await super().stop(frame)

    async def cancel(self, frame: CancelFrame) -> None:
        await self._stop_sessions()
        await super().cancel(frame)

    async def cleanup(self) -> None:
        await self._stop_sessions()
        if self._owns_client and self._client is not None:
            client, self._client = self._client, None
            await client.close()
        await super().cleanup()

    async def _stop_sessions(self) -> None:
        if self._sessions_task is not None:
            task, self._sessions_task = self._sessions_task, None
            if not task.done():
                await self.cancel_task(task)
        self._close_speech()

    async def _do_reconnect(self) -> None:
        """Settings changed: the session ends with its finals, the next one takes them."""
        if self._queue is not None:
            self._queue.put(Rotate())

    async def _update_settings(self, delta: STTSettings) -> dict[str, Any]:
        changed = await super()._update_settings(delta)
        if "language" in changed:
            await self._request_reconnect()
        elif "keyterms" in changed and self._queue is not None:
            self._queue.put(SetPhrases(self._phrases()))  # after the audio before it: from its next utterance
        return changed

    def _phrases(self) -> tuple[Phrase, ...]:
        return keyterm_phrases(self._settings)

    # -- audio in --------------------------------------------------------------

    async def run_stt(self, audio: bytes) -> AsyncGenerator[Frame | None, None]:
        if self._queue is not None:
            self._queue.put(bytes(audio))
        yield None

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, VADUserStoppedSpeakingFrame) and self._finalize_on_vad_stop and self._queue is not None:
            self._queue.put(FINALIZE)

    async def _audio(self) -> AsyncIterator[AudioItem]:
        assert self._queue is not None
        while True:
            item = await self._queue.get()
            if isinstance(item, End):
                self._input_ended = True
                return
            if isinstance(item, Rotate):
                return
            if isinstance(item, bytes):
                self._sent_bytes += len(item)
            yield item

    # -- sessions --------------------------------------------------------------

    def _config(self) -> StreamConfig:
        language = self._settings.language
        return StreamConfig(
            encoding="linear16",
            sample_rate_hz=self.sample_rate,
            language_code=str(language) if isinstance(language, str) else "",
            interim_results=self._interim_results,
            word_time_offsets=self._word_time_offsets,
            endpointing_silence_ms=self._endpointing_silence_ms,
            phrases=self._phrases(),
        )

    async def _sessions(self) -> None:
        """One session after another until the input ends: a new one when the server ended the
        last while audio goes on (its max duration, a rotation), or after one failed."""
        while not self._input_ended:
            try:
                await self._session()
            except grpc.RpcError as e:
                await self._boundaries(self._order.close())  # the session is lost: its speech is over
                details = error_details(e)
                message = f"{self}: voxgate: {format_error(details)}"
                await self._call_event_handler("on_connection_error", message)
                category = _PERMANENT.get(e.code())  # type: ignore[attr-defined]
                if category is not None:
                    await self.push_error(message, exception=e, category=category, force_treat_as_permanent=True)
                    return
                await self.push_error(message, exception=e, category=ErrorCategory.CONNECTIVITY)
                if self._input_ended or self._ending:
                    return
                await asyncio.sleep(self._retry_delay_s)
            finally:
                self._close_speech()
                if self._queue is not None and self._queue.dropped_bytes:
                    logger.warning(
                        f"{self}: {self._queue.dropped_bytes} bytes of audio dropped while no voxgate session took them"
                    )
                    self._queue.dropped_bytes = 0

    async def _session(self) -> None:
        assert self._client is not None
        self._base_s += self._sent_bytes / (2 * self.sample_rate)
        self._sent_bytes = 0
        responses = self._client.stream(
            self._config(), self._audio(), metadata=self._endpoint.metadata, resume=self._resume
        )
        try:
            async with contextlib.aclosing(responses):
                async for r in responses:
                    await self._on_response(r)
        finally:
            await self._call_event_handler("on_disconnected")

    async def _on_response(self, r: pb.StreamingRecognizeResponse) -> None:
        kind = r.WhichOneof("response")
        if kind == "started":
            self._session_id = r.started.session_id
            self._language = r.started.effective_config.language_code
            if not r.started.resumed:
                await self._call_event_handler("on_connected")
                await self._call_event_handler("on_session_started", self._session_id)
        elif kind == "speech_event":
            started = r.speech_event.type == pb.SPEECH_EVENT_TYPE_SPEECH_STARTED
            offset = self._base_s + duration_s(r.speech_event.offset)
            await self._boundaries(self._order.speech_event(started, offset))
        elif kind == "result":
            await self._on_result(r.result)
        elif kind == "ended":
            await self._boundaries(self._order.close())
        elif kind == "warning":
            logger.warning(f"{self}: voxgate {r.warning.code}: {r.warning.message}")

    async def _on_result(self, result: pb.RecognitionResult) -> None:
        text = result.text.strip()
        language = pipecat_language(self._language)
        data = voxgate_result(result, self._session_id, self._base_s)
        if not result.is_final:
            if text and self._interim_results:
                await self._boundaries(self._order.interim(data.start_s))
                await self.push_frame(
                    InterimTranscriptionFrame(text, self._user_id, time_now_iso8601(), language, result=data)
                )
            return
        if text:
            await self.emit_stt_usage_metrics()
            await self.push_frame(
                TranscriptionFrame(text, self._user_id, time_now_iso8601(), language, result=data, finalized=True)
            )
            await self._handle_transcription(text, True, language)
        await self._boundaries(self._order.final())

    @traced_stt
    async def _handle_transcription(
        self, transcript: str, is_final: bool, language: Language | str | None = None
    ) -> None:
        """Tracing hook (an STT span per final transcript)."""

    # -- speech segments ---------------------------------------------------------

    async def _boundaries(self, boundaries: list[SpeechBoundary]) -> None:
        for b in boundaries:
            if b.started:
                await self._call_event_handler("on_speech_started", b.offset_s)
                if self._vad_events:
                    await self.broadcast_frame(ProposedUserStartedSpeakingFrame)
            else:
                await self._call_event_handler("on_speech_stopped", b.offset_s)
                if self._vad_events:
                    await self.broadcast_frame(ProposedUserStoppedSpeakingFrame)

    def _close_speech(self) -> None:
        """The session is over or failed: forget its speech state (no frames from a task being
        torn down)."""
        self._order.reset()
