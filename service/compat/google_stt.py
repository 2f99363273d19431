"""Google Cloud Speech-to-Text v1 (`google.cloud.speech.v1.Speech`) served on voxgate sessions.

StreamingRecognize (interim results, single_utterance, voice activity events)
and Recognize (inline audio as one session). Which fields are honoured:
docs/compat.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
from google.protobuf import duration_pb2

from voxgate_client.v1 import speech_pb2 as pb

from .. import errors, phrase_hints
from ..events import SpeechEvent
from ..transcript import Result
from . import adapter
from ._proto import cloud_speech_pb2 as gs
from ._proto import cloud_speech_pb2_grpc

SERVICE = gs.DESCRIPTOR.services_by_name["Speech"].full_name
AudioEncoding = gs.RecognitionConfig.AudioEncoding
EventType = gs.StreamingRecognizeResponse.SpeechEventType
ENCODINGS = {
    AudioEncoding.LINEAR16: pb.AUDIO_ENCODING_LINEAR16,
    AudioEncoding.MULAW: pb.AUDIO_ENCODING_MULAW,
}
STREAM_FIELDS = adapter.field_map("streaming_config.config.", "audio_content")
UNARY_FIELDS = adapter.field_map("config.", "audio.content")


def _duration(ms: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def voxgate_config(rc: gs.RecognitionConfig, interim_results: bool, prefix: str) -> pb.StreamingConfig:
    if rc.encoding not in ENCODINGS:
        name = AudioEncoding.Name(rc.encoding) if rc.encoding in AudioEncoding.values() else str(rc.encoding)
        raise errors.unsupported_format(
            prefix + "encoding", f"encoding must be LINEAR16 or MULAW for headerless audio (got {name})"
        )
    return adapter.voxgate_config(
        encoding=ENCODINGS[rc.encoding],
        sample_rate_hz=rc.sample_rate_hertz,
        channels=rc.audio_channel_count,
        language_code=rc.language_code,
        interim_results=interim_results,
        word_time_offsets=rc.enable_word_time_offsets,
        separate_channels=rc.enable_separate_recognition_per_channel,
        phrase_hints=_phrase_hints(rc, prefix),
    )


def _phrase_hints(rc: gs.RecognitionConfig, prefix: str) -> pb.PhraseHints:
    """`speech_contexts` and inline `adaptation.phrase_sets`, one list. What names a resource voxgate does not
    keep (PhraseSet and CustomClass resources) or what it cannot apply (classes, grammars) is refused by name."""
    adaptation = prefix + "adaptation."
    refused = (
        ("phrase_set_references", rc.adaptation.phrase_set_references, "PhraseSet resources are not kept"),
        ("custom_classes", rc.adaptation.custom_classes, "custom classes are not supported"),
    )
    for name, given, why in refused:
        if given:
            raise errors.invalid_config(adaptation + name, f"{why}: send the phrases inline in adaptation.phrase_sets")
    if rc.adaptation.abnf_grammar.abnf_strings:
        raise errors.invalid_config(adaptation + "abnf_grammar", "ABNF grammars are not supported")
    candidates = phrase_hints.speech_contexts(rc.speech_contexts, prefix + "speech_contexts")
    for i, phrase_set in enumerate(rc.adaptation.phrase_sets):
        at = f"{adaptation}phrase_sets[{i}]"
        candidates += [
            phrase_hints.Candidate(
                p.value,
                p.boost or phrase_set.boost or None,
                f"{at}.phrases[{j}].value",
                f"{at}.phrases[{j}].boost" if p.boost else f"{at}.boost",
            )
            for j, p in enumerate(phrase_set.phrases)
        ]
    return phrase_hints.vendor_hints(candidates, prefix + "speech_contexts")


def _alternative(r: Result, words: bool) -> gs.SpeechRecognitionAlternative:
    alt = gs.SpeechRecognitionAlternative(transcript=r.text)
    if words and r.is_final:
        alt.words.extend(
            gs.WordInfo(word=w.word, start_time=_duration(w.start_ms), end_time=_duration(w.end_ms)) for w in r.words
        )
    return alt


def streaming_result(r: Result, language: str, words: bool, stability: float) -> gs.StreamingRecognitionResult:
    return gs.StreamingRecognitionResult(
        alternatives=[_alternative(r, words)],
        is_final=r.is_final,
        stability=0.0 if r.is_final else stability,
        result_end_time=_duration(r.end_ms),
        channel_tag=r.channel,
        language_code=language,
    )


def _event(kind: int, offset_ms: int) -> gs.StreamingRecognizeResponse:
    return gs.StreamingRecognizeResponse(
        speech_event_type=kind,  # type: ignore[arg-type]
        speech_event_time=_duration(offset_ms),
    )


def _inline_audio(request: gs.RecognizeRequest) -> bytes:
    source = request.audio.WhichOneof("audio_source")
    if source is None:  # as Google's own: the audio is missing, not a uri
        raise errors.invalid_config("audio.content", "no audio: set audio.content (inline audio bytes)")
    if source != "content":
        raise errors.invalid_config("audio.uri", "only inline audio.content is supported, not audio.uri")
    return request.audio.content


class GoogleSpeechServicer(adapter.CompatServicer, cloud_speech_pb2_grpc.SpeechServicer):
    service, stream_fields, unary_fields = SERVICE, STREAM_FIELDS, UNARY_FIELDS
    voxgate_config = staticmethod(voxgate_config)

    async def StreamingRecognize(
        self, request_iterator: AsyncIterator[gs.StreamingRecognizeRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[gs.StreamingRecognizeResponse]:
        # single_utterance: at the end of the first utterance stop reading audio, as a half-close would.
        end_of_utterance = asyncio.Event()
        async for first, cfg, out, stability in self._streaming(request_iterator, context, end_of_utterance):
            sc = first.streaming_config
            if isinstance(out, Result):
                yield gs.StreamingRecognizeResponse(
                    results=[streaming_result(out, cfg.language_code, cfg.word_time_offsets, stability)]
                )
            elif isinstance(out, SpeechEvent):
                if sc.enable_voice_activity_events:
                    kind = EventType.SPEECH_ACTIVITY_BEGIN if out.started else EventType.SPEECH_ACTIVITY_END
                    yield _event(kind, out.offset_ms)
                if sc.single_utterance and not out.started and not end_of_utterance.is_set():
                    end_of_utterance.set()
                    yield _event(EventType.END_OF_SINGLE_UTTERANCE, out.offset_ms)

    async def Recognize(self, request: gs.RecognizeRequest, context: grpc.aio.ServicerContext) -> gs.RecognizeResponse:
        cfg, results = await self._recognize(request.config, lambda: _inline_audio(request), context)
        return gs.RecognizeResponse(
            results=[
                gs.SpeechRecognitionResult(
                    alternatives=[_alternative(r, cfg.word_time_offsets)],
                    channel_tag=r.channel,
                    result_end_time=_duration(r.end_ms),
                    language_code=cfg.language_code,
                )
                for r in results
            ]
        )
