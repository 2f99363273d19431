"""What the compatibility endpoints share: request streams → voxgate inputs, sessions, errors.

A compat servicer turns its first request into a voxgate `StreamingConfig`, its
audio requests into `ClientInput`, and runs the session through
`SpeechServicer.run_session` — the same validation, admission, limits and drain
as voxgate.v1 — then maps the `SessionOutput`s back into its own responses.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any

import grpc
import structlog
from google.protobuf.message import DecodeError

from engine_api.info import InterimStability
from voxgate_client.v1 import speech_pb2 as pb

from .. import errors, request_stream
from ..api import SpeechServicer
from ..config import Config
from ..events import AudioIn, ClientInput, EndReason, KeepAliveIn, SessionOutput, Started
from ..session_config import SessionConfig
from ..transcript import Result

log = structlog.get_logger("compat")

# voxgate's field names (StreamError.field) → the compat APIs' names, below their config message.
FIELD_NAMES = {
    "config.encoding": "encoding",
    "config.sample_rate_hz": "sample_rate_hertz",
    "config.audio_channel_count": "audio_channel_count",
    "config.channel_mode": "enable_separate_recognition_per_channel",
    "config.language_code": "language_code",
}


# The `stability` of an interim result (Google, Riva: how likely the recognizer keeps its guess).
APPEND_ONLY_STABILITY = 1.0  # the final only appends: interim text is never revised
REVISABLE_STABILITY = 0.5  # the final may replace the interim text (no per-result estimate is made)


def interim_stability(started: Started) -> float:
    """The stability every interim result of this session carries: 1.0 only where the engine is append-only."""
    return APPEND_ONLY_STABILITY if started.interim_stability == InterimStability.APPEND_ONLY else REVISABLE_STABILITY


def field_map(config_prefix: str, audio_field: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """voxgate field → the compat request's field path (e.g. "streaming_config.config.sample_rate_hertz")."""
    names = {k: config_prefix + v for k, v in {**FIELD_NAMES, **(extra or {})}.items()}
    names["audio"] = audio_field
    return names


def voxgate_config(
    *,
    encoding: pb.AudioEncoding.ValueType,
    sample_rate_hz: int,
    channels: int,
    language_code: str,
    interim_results: bool,
    word_time_offsets: bool,
    silence_ms: int = 0,
    separate_channels: bool = False,
    phrase_hints: pb.PhraseHints | None = None,
) -> pb.StreamingConfig:
    """The voxgate.v1 config a compat config maps to; G.711 without a rate means 8 kHz.

    Both vendors recognize only the first channel of multichannel audio unless asked for separate recognition.
    """
    if not sample_rate_hz and encoding in (pb.AUDIO_ENCODING_MULAW, pb.AUDIO_ENCODING_ALAW):
        sample_rate_hz = 8000
    return pb.StreamingConfig(
        encoding=encoding,
        sample_rate_hz=sample_rate_hz,
        audio_channel_count=channels,
        language_code=language_code,
        interim_results=interim_results,
        enable_word_time_offsets=word_time_offsets,
        endpointing=pb.EndpointingConfig(silence_ms=silence_ms),
        channel_mode=pb.CHANNEL_MODE_SEPARATE if separate_channels else pb.CHANNEL_MODE_FIRST,
        phrase_hints=phrase_hints,
    )


def frame_bytes(config: pb.StreamingConfig) -> int:
    """A size every whole frame of the config's audio divides (2 bytes × channels suits any encoding)."""
    return 2 * max(config.audio_channel_count, 1)


def audio_pieces(data: bytes, limit: int, frame: int = 2) -> Iterator[AudioIn]:
    """Compat audio messages may be larger than voxgate's per-message limit: split them (on whole frames)."""
    step = max(frame, limit - limit % frame)
    for i in range(0, len(data), step):
        yield AudioIn(data[i : i + step])


async def stream_inputs(
    requests: AsyncIterator[Any], audio_field: str, oneof: str, limit: int, stop: asyncio.Event, frame: int = 2
) -> AsyncIterator[ClientInput]:
    """Audio requests → voxgate inputs until the client half-closes or `stop` is set (single utterance).

    A second config is a PROTOCOL_ORDER error; a request with no audio (empty, or only a Riva `id`)
    is a keep-alive. Vendor clients read files in power-of-two chunks, which need not hold whole frames
    (3 channels: 6-byte frames): a partial frame at a message's end waits for the next message's bytes.
    """
    stopped = asyncio.ensure_future(stop.wait())
    pending: asyncio.Future[Any] | None = None
    partial = b""  # the start of a frame whose rest is in the next message
    try:
        while not stop.is_set():
            pending = asyncio.ensure_future(anext(requests, None))
            done, _ = await asyncio.wait({pending, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if pending not in done:
                return
            try:
                msg = pending.result()
            except DecodeError as exc:  # the stream ends at a request gRPC could not decode
                raise request_stream.malformed(exc) from exc
            finally:
                pending = None
            if msg is None:
                if partial:  # the stream ends inside a frame: the session says so (INVALID_AUDIO)
                    yield AudioIn(partial)
                return
            kind = msg.WhichOneof(oneof)
            if kind == audio_field and getattr(msg, audio_field):
                data = partial + getattr(msg, audio_field)
                whole = len(data) - len(data) % frame
                partial = data[whole:]
                for piece in audio_pieces(data[:whole], limit, frame):
                    yield piece
            elif kind in (None, audio_field):
                yield KeepAliveIn()
            else:
                raise errors.protocol_order(f"{kind} may only be sent once, in the first request")
    finally:
        stopped.cancel()
        if pending is not None:  # stopped early, or the session ended without reading on
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.RpcError, StopAsyncIteration, DecodeError):
                await pending


async def whole_audio(data: bytes, limit: int, frame: int = 2) -> AsyncIterator[ClientInput]:
    """The inputs of a unary Recognize: all of its audio, then the end of the stream."""
    for piece in audio_pieces(data, limit, frame):
        yield piece


async def session(
    speech: SpeechServicer,
    api: str,
    config: pb.StreamingConfig,
    inputs: AsyncIterator[ClientInput],
    context: grpc.aio.ServicerContext,
) -> AsyncIterator[tuple[SessionConfig, SessionOutput]]:
    """One voxgate session for a compat RPC: (effective config, output) from Started to Ended.

    SpeechServicer.run_session does validation, admission, limits and drain exactly as for
    voxgate.v1; a refused or failed session raises StreamError after its last output. The vendor
    protocols cannot resume, so a session whose client vanished is ended (with its finals, unread)
    rather than left waiting for a resume.
    """
    structlog.contextvars.bind_contextvars(peer=context.peer(), api=api)
    token, completed = "", False
    outputs = speech.run_session(config, inputs)
    try:
        async for _seq, out, cfg in outputs:
            if isinstance(out, Started):
                token = out.resume_token
            yield cfg, out
        completed = True
    finally:
        if not completed:
            await outputs.aclose()  # type: ignore[attr-defined]  # an async generator: let it detach first
            _end_detached(speech, token)
        structlog.contextvars.unbind_contextvars("session_id", "peer", "api")


def _end_detached(speech: SpeechServicer, token: str) -> None:
    for live in speech.sessions:
        if token and live.resume_token == token:
            live.stop_input(EndReason.CLIENT_END)


async def finals(
    speech: SpeechServicer,
    api: str,
    config: pb.StreamingConfig,
    inputs: AsyncIterator[ClientInput],
    context: grpc.aio.ServicerContext,
) -> tuple[SessionConfig, list[Result]]:
    """Run a whole session (unary Recognize): its effective config and its final results."""
    effective: SessionConfig | None = None
    results: list[Result] = []
    async for cfg, out in session(speech, api, config, inputs, context):
        effective = cfg
        if isinstance(out, Result) and out.is_final:
            results.append(out)
    assert effective is not None, "run_session yields Started first or raises"
    return effective, results


def renamed(exc: errors.StreamError, names: Mapping[str, str]) -> errors.StreamError:
    """The same error, naming the field as the compat API's request does."""
    return replace(exc, field=names[exc.field]) if exc.field in names else exc


async def abort(context: grpc.aio.ServicerContext, exc: errors.StreamError, names: Mapping[str, str]) -> None:
    exc = renamed(exc, names)
    log.info("compat_error", code=exc.code.name, reason=exc.reason, field=exc.field, error=exc.message)
    await context.abort(exc.code, exc.message, trailing_metadata=exc.trailing_metadata())


async def first_streaming_request(requests: AsyncIterator[Any]) -> Any | None:
    """The first request, which both vendor protocols require to carry streaming_config; None if none came."""
    first = await request_stream.next_request(requests, "the first request")
    if first is not None and first.WhichOneof("streaming_request") != "streaming_config":
        raise errors.protocol_order("the first request must carry streaming_config")
    return first


class CompatServicer:
    """What the vendor servicers share: their two RPCs up to their own request and response messages.

    A subclass names its gRPC service, maps its vendor config to voxgate's (`voxgate_config`) and its field names
    (`stream_fields`, `unary_fields`: errors name the field as the vendor's request does), and turns what
    `_streaming` and `_recognize` give into its own responses.
    """

    service: str
    stream_fields: Mapping[str, str]
    unary_fields: Mapping[str, str]

    def __init__(self, speech: SpeechServicer, config: Config) -> None:
        self._speech = speech
        self._limit = config.max_audio_bytes_per_message

    def voxgate_config(self, rc: Any, interim_results: bool, prefix: str) -> pb.StreamingConfig:
        raise NotImplementedError

    async def _streaming(
        self, request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext, stop: asyncio.Event | None = None
    ) -> AsyncIterator[tuple[Any, SessionConfig, SessionOutput, float]]:
        """A StreamingRecognize: (its first request, the effective config, an output, the interim results'
        stability) for every output of the session on the requests' `audio_content`, read until `stop` is set."""
        requests = aiter(request_iterator)
        try:
            first = await first_streaming_request(requests)
            if first is None:
                return
            sc = first.streaming_config
            config = self.voxgate_config(sc.config, sc.interim_results, "streaming_config.config.")
            inputs = stream_inputs(
                requests,
                "audio_content",
                "streaming_request",
                self._limit,
                stop or asyncio.Event(),
                frame_bytes(config),
            )
            stability = REVISABLE_STABILITY
            async for cfg, out in session(self._speech, self.service, config, inputs, context):
                if isinstance(out, Started):
                    stability = interim_stability(out)
                yield first, cfg, out, stability
        except errors.StreamError as exc:
            await abort(context, exc, self.stream_fields)

    async def _recognize(
        self, rc: Any, audio: Callable[[], bytes], context: grpc.aio.ServicerContext
    ) -> tuple[SessionConfig, list[Result]]:
        """A Recognize: the whole `audio()` (which may refuse the request) as one session, its final results."""
        try:
            data = audio()
            config = self.voxgate_config(rc, False, "config.")
            return await finals(
                self._speech, self.service, config, whole_audio(data, self._limit, frame_bytes(config)), context
            )
        except errors.StreamError as exc:
            await abort(context, exc, self.unary_fields)
            raise AssertionError("unreachable: abort raises") from exc
