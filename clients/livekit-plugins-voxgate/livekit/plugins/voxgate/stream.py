"""One LiveKit `SpeechStream`: a voxgate session (or several in a row) fed with the frames
pushed into it, its responses as LiveKit's speech events (see the package's stt module for the
mapping, and why END_OF_SPEECH waits for the utterance's final)."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
from livekit import rtc
from livekit.agents import APIConnectionError, APIConnectOptions, LanguageCode, stt
from livekit.agents.types import NOT_GIVEN, NotGivenOr
from livekit.agents.utils import is_given

from voxgate_client import FINALIZE, AudioItem, Phrase, SetPhrases, as_phrases
from voxgate_client.responses import duration_s
from voxgate_client.speech_order import SpeechBoundary, SpeechOrder
from voxgate_client.v1 import speech_pb2 as pb

from .convert import chunk_size, mono_pcm, timed
from .errors import api_error
from .host import StreamHost, STTOptions
from .log import logger

USAGE_INTERVAL_S = 5.0  # RECOGNITION_USAGE after every 5 s of audio sent


class SpeechStream(stt.SpeechStream):
    """One voxgate session (or several in a row: a drained server's session is continued in a
    new one) fed with the frames pushed into the stream."""

    def __init__(self, *, stt: StreamHost, opts: STTOptions, conn_options: APIConnectOptions) -> None:
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

    def update_options(self, *, keyterms: NotGivenOr[Sequence[str | Phrase]] = NOT_GIVEN) -> None:
        """Replace the session's key terms (phrase hints) after the audio pushed so far: the
        utterances that begin after it use them."""
        if is_given(keyterms) and not self._input_ch.closed:
            self._opts = dataclasses.replace(self._opts, keyterms=as_phrases(keyterms))
            # In the input channel, after the frames before it: it takes effect at this point of the audio.
            self._input_ch.send_nowait(SetPhrases(self._opts.keyterms))

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
            metadata=self._voxgate._endpoint.metadata,
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
            raise api_error(e) from e
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
        FINALIZE for each flush(), SetPhrases for each keyterms update; ends when the input ends."""
        per_chunk = chunk_size(self._opts.sample_rate)
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
                buf += mono_pcm(item)
                while len(buf) >= per_chunk:
                    chunk = bytes(buf[:per_chunk])
                    del buf[:per_chunk]
                    yield self._sent(chunk)
            elif isinstance(item, self._FlushSentinel):
                if buf:
                    yield self._sent(bytes(buf))
                    buf.clear()
                yield FINALIZE
            elif isinstance(item, SetPhrases):
                if buf:
                    yield self._sent(bytes(buf))
                    buf.clear()
                yield item
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
            offset = duration_s(r.speech_event.offset)
            self._boundaries(self._order.speech_event(started, offset))
        elif kind == "result":
            result = r.result
            text = result.text.strip()
            if not result.is_final:
                if text and self._opts.interim_results:
                    self._boundaries(self._order.interim(duration_s(result.start_offset)))
                    self._emit(stt.SpeechEventType.INTERIM_TRANSCRIPT, alternatives=[self._data(result)])
                return
            if text:
                self._emit(stt.SpeechEventType.FINAL_TRANSCRIPT, alternatives=[self._data(result)])
            self._boundaries(self._order.final())
        elif kind == "ended":
            # The session's finals are out. A drained session is continued by the client in a new
            # one (a new `started` follows); the utterance was closed at the seam either way.
            self._close_speech()
        elif kind == "phrase_hints_updated":
            n = len(r.phrase_hints_updated.phrase_hints.phrases)
            logger.debug("voxgate: %d key terms in use", n, extra={"session_id": self._session_id})
        elif kind == "warning":
            logger.warning("voxgate: %s: %s", r.warning.code, r.warning.message, extra={"session_id": self._session_id})

    def _data(self, result: pb.RecognitionResult) -> stt.SpeechData:
        offset = self.start_time_offset
        return stt.SpeechData(
            language=LanguageCode(self._language),
            text=result.text.strip(),
            start_time=duration_s(result.start_offset) + offset,
            end_time=duration_s(result.end_offset) + offset,
            words=[timed(w, offset) for w in result.words] if result.words else None,
            metadata={
                "session_id": self._session_id,
                "result_id": result.result_id,
                "utterance_index": result.utterance_index,
                "revised": result.revised,
            },
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
