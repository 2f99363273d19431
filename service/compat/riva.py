"""NVIDIA Riva ASR (`nvidia.riva.asr.RivaSpeechRecognition`) served on voxgate sessions.

StreamingRecognize, Recognize (the whole audio as one session) and
GetRivaSpeechRecognitionConfig. Which fields are honoured: docs/compat.md.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import grpc

from voxgate_client.v1 import speech_pb2 as pb

from .. import errors, phrase_hints
from ..transcript import Result
from . import adapter
from ._proto import riva_asr_pb2 as rasr
from ._proto import riva_asr_pb2_grpc
from ._proto import riva_audio_pb2 as raudio

SERVICE = rasr.DESCRIPTOR.services_by_name["RivaSpeechRecognition"].full_name
ENCODINGS = {
    raudio.ENCODING_UNSPECIFIED: pb.AUDIO_ENCODING_LINEAR16,  # Riva's default: raw PCM
    raudio.LINEAR_PCM: pb.AUDIO_ENCODING_LINEAR16,
    raudio.MULAW: pb.AUDIO_ENCODING_MULAW,
    raudio.ALAW: pb.AUDIO_ENCODING_ALAW,
}
ENDPOINTING = {"config.endpointing.silence_ms": "endpointing_config.stop_history"}
STREAM_FIELDS = adapter.field_map("streaming_config.config.", "audio_content", ENDPOINTING)
UNARY_FIELDS = adapter.field_map("config.", "audio", ENDPOINTING)


def voxgate_config(rc: rasr.RecognitionConfig, interim_results: bool, prefix: str) -> pb.StreamingConfig:
    if rc.encoding not in ENCODINGS:
        name = (
            raudio.AudioEncoding.Name(rc.encoding) if rc.encoding in raudio.AudioEncoding.values() else str(rc.encoding)
        )
        raise errors.unsupported_format(prefix + "encoding", f"encoding must be LINEAR_PCM, MULAW or ALAW (got {name})")
    silence = rc.endpointing_config.stop_history if rc.HasField("endpointing_config") else 0
    return adapter.voxgate_config(
        encoding=ENCODINGS[rc.encoding],
        sample_rate_hz=rc.sample_rate_hertz,
        channels=rc.audio_channel_count,
        language_code=rc.language_code,
        interim_results=interim_results,
        word_time_offsets=rc.enable_word_time_offsets,
        silence_ms=max(silence, 0),
        separate_channels=rc.enable_separate_recognition_per_channel,
        phrase_hints=phrase_hints.vendor_hints(
            phrase_hints.speech_contexts(rc.speech_contexts, prefix + "speech_contexts"), prefix + "speech_contexts"
        ),
    )


def _alternative(r: Result, language: str, words: bool) -> rasr.SpeechRecognitionAlternative:
    alt = rasr.SpeechRecognitionAlternative(transcript=r.text, language_code=[language] if language else [])
    if words and r.is_final:
        alt.words.extend(
            rasr.WordInfo(word=w.word, start_time=w.start_ms, end_time=w.end_ms, language_code=language)
            for w in r.words
        )
    return alt


def streaming_result(r: Result, language: str, words: bool, stability: float) -> rasr.StreamingRecognitionResult:
    return rasr.StreamingRecognitionResult(
        alternatives=[_alternative(r, language, words)],
        is_final=r.is_final,
        stability=0.0 if r.is_final else stability,
        audio_processed=r.end_ms / 1000,
        channel_tag=r.channel,
    )


def _configs(caps: pb.GetCapabilitiesResponse) -> Iterable[rasr.RivaSpeechRecognitionConfigResponse.Config]:
    engine = caps.engine.name or "voxgate"
    for language in caps.languages:
        for kind, suffix in (("online", "streaming"), ("offline", "offline")):
            yield rasr.RivaSpeechRecognitionConfigResponse.Config(
                model_name=f"voxgate-{engine}-{language}-asr-{suffix}",
                parameters={
                    "type": kind,
                    "language_code": language,
                    "streaming": str(kind == "online").lower(),
                    "engine": engine,
                    "engine_model": caps.engine.model,
                    "encodings": "LINEAR_PCM,MULAW,ALAW",
                    "min_sample_rate_hz": str(caps.min_sample_rate_hz),
                    "max_sample_rate_hz": str(caps.max_sample_rate_hz),
                },
            )


class RivaServicer(adapter.CompatServicer, riva_asr_pb2_grpc.RivaSpeechRecognitionServicer):
    service, stream_fields, unary_fields = SERVICE, STREAM_FIELDS, UNARY_FIELDS
    voxgate_config = staticmethod(voxgate_config)

    async def StreamingRecognize(
        self, request_iterator: AsyncIterator[rasr.StreamingRecognizeRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[rasr.StreamingRecognizeResponse]:
        async for first, cfg, out, stability in self._streaming(request_iterator, context):
            if isinstance(out, Result):
                result = streaming_result(out, cfg.language_code, cfg.word_time_offsets, stability)
                yield rasr.StreamingRecognizeResponse(results=[result], id=first.id)

    async def Recognize(
        self, request: rasr.RecognizeRequest, context: grpc.aio.ServicerContext
    ) -> rasr.RecognizeResponse:
        cfg, results = await self._recognize(request.config, lambda: request.audio, context)
        return rasr.RecognizeResponse(
            id=request.id,
            results=[
                rasr.SpeechRecognitionResult(
                    alternatives=[_alternative(r, cfg.language_code, cfg.word_time_offsets)],
                    audio_processed=r.end_ms / 1000,
                    channel_tag=r.channel,
                )
                for r in results
            ],
        )

    async def GetRivaSpeechRecognitionConfig(
        self, request: rasr.RivaSpeechRecognitionConfigRequest, context: grpc.aio.ServicerContext
    ) -> rasr.RivaSpeechRecognitionConfigResponse:
        caps = await self._speech.GetCapabilities(pb.GetCapabilitiesRequest(), context)
        configs = [c for c in _configs(caps) if not request.model_name or c.model_name == request.model_name]
        return rasr.RivaSpeechRecognitionConfigResponse(model_config=configs)
