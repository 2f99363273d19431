"""The Riva endpoint (nvidia.riva.asr.RivaSpeechRecognition), driven by the unmodified nvidia-riva-client."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import grpc
import numpy as np
import pytest
import riva.client
import soxr
from riva.client.proto import riva_asr_pb2 as rasr

from bench.wer import engine_chunks, engine_samples, sphinx_final, whisper_final
from tests.helpers import ServerProcess, error_reason, paced, read_wav_pcm, silence, word_error_rate
from tests.raw_wire import GARBAGE, RIVA_STREAM, raw_stream
from voxgate_client.g711 import decode_mulaw, encode_alaw, encode_mulaw
from voxgate_client.v1 import speech_pb2 as pb

MAX_WER = 0.25
# service.compat.adapter.REVISABLE_STABILITY (the service's compat protos cannot be imported next to the vendor's)
REVISABLE_STABILITY = 0.5
GO_FORWARD = "go forward ten meters"


def direct_final(engine: str, pcm: bytes) -> str:
    """The engine's model alone on the samples voxgate's engine gets for this 16 kHz audio."""
    if engine == "sphinx":
        return sphinx_final(engine_samples(pcm, "linear16"))
    return whisper_final(engine_chunks(pcm, "linear16"))


def asr(server: ServerProcess) -> riva.client.ASRService:
    return riva.client.ASRService(riva.client.Auth(uri=server.target))


def streaming_config(
    rate: int = 16000, encoding: int = riva.client.AudioEncoding.LINEAR_PCM, interim: bool = True, words: bool = True
) -> rasr.StreamingRecognitionConfig:
    return riva.client.StreamingRecognitionConfig(
        config=riva.client.RecognitionConfig(
            encoding=encoding,
            sample_rate_hertz=rate,
            language_code="en-US",
            max_alternatives=1,
            enable_automatic_punctuation=True,
            enable_word_time_offsets=words,
            audio_channel_count=1,
        ),
        interim_results=interim,
    )


def chunks(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def stream(
    server: ServerProcess, audio: list[bytes], config: rasr.StreamingRecognitionConfig
) -> list[rasr.StreamingRecognitionResult]:
    responses = asr(server).streaming_response_generator(audio_chunks=audio, streaming_config=config)
    return [result for response in responses for result in response.results]


def final_text(results: list[rasr.StreamingRecognitionResult]) -> str:
    return " ".join(r.alternatives[0].transcript for r in results if r.is_final).strip()


def test_streaming_gives_interims_then_a_final_with_word_offsets(sphinx_server: ServerProcess) -> None:
    pcm, rate = read_wav_pcm("go_forward.wav")
    audio = list(paced(chunks(pcm + silence(1.0), rate // 10 * 2), 0.1))  # 100 ms chunks, real time
    results = stream(sphinx_server, audio, streaming_config())

    assert word_error_rate(GO_FORWARD, final_text(results)) <= MAX_WER
    first_final = next(i for i, r in enumerate(results) if r.is_final)
    interims = results[:first_final]
    assert interims, "interim results come before the final one"
    # PocketSphinx's final may revise what its interims showed: they say so with a stability below 1.
    assert all(r.stability == REVISABLE_STABILITY and not r.alternatives[0].words for r in interims)
    texts = [r.alternatives[0].transcript for r in interims]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:], strict=False))

    words = [w for r in results if r.is_final for w in r.alternatives[0].words]
    assert [w.word for w in words] == final_text(results).split()
    duration_ms = len(pcm) / 2 / rate * 1000
    for w in words:  # Riva word offsets are milliseconds
        assert 0 <= w.start_time < w.end_time <= duration_ms + 50
    assert [w.start_time for w in words] == sorted(w.start_time for w in words)


@pytest.mark.parametrize("engine", ["sphinx", "whisper"])
def test_the_final_is_the_engines_own_hypothesis(engine: str, request: pytest.FixtureRequest) -> None:
    server: ServerProcess = request.getfixturevalue(f"{engine}_server")
    # go_forward on sphinx: the interims show "... ten meters", the decoder's final pass says "... ten years".
    pcm, rate = read_wav_pcm("go_forward.wav")
    config = streaming_config(rate)
    config.config.endpointing_config.stop_history = 10000  # one utterance
    results = stream(server, chunks(pcm, 3200), config)
    assert [r.is_final for r in results].count(True) == 1
    assert final_text(results).split() == direct_final(engine, pcm).split()


def test_interim_results_off_gives_only_finals_and_no_words_unless_asked(sphinx_server: ServerProcess) -> None:
    pcm, rate = read_wav_pcm("flite_rms_turn_left.wav")
    results = stream(sphinx_server, chunks(pcm, 3200), streaming_config(rate, interim=False, words=False))
    assert results and all(r.is_final for r in results)
    assert not any(r.alternatives[0].words for r in results)
    assert word_error_rate("turn left at the next intersection", final_text(results)) <= MAX_WER


@pytest.mark.parametrize(
    ("encoding", "encode"),
    [
        (riva.client.AudioEncoding.MULAW, encode_mulaw),
        (riva.client.AudioEncoding.ALAW, encode_alaw),
    ],
)
def test_g711_transcript(sphinx_server: ServerProcess, encoding: int, encode: Callable[..., bytes]) -> None:
    # G.711 at the clip's own 16 kHz: PocketSphinx's model is wideband, so the transcript can be checked.
    pcm, rate = read_wav_pcm("flite_rms_call_me_back.wav")
    companded = encode(np.frombuffer(pcm, dtype="<i2"))
    text = final_text(stream(sphinx_server, chunks(companded, 1600), streaming_config(rate, encoding)))
    assert word_error_rate("please call me back tomorrow morning", text) <= MAX_WER


def test_mulaw_8k_is_decoded_exactly(sphinx_server: ServerProcess) -> None:
    # Telephony: 8 kHz mu-law gives what the very same samples give as 8 kHz LINEAR_PCM.
    pcm, rate = read_wav_pcm("flite_rms_call_me_back.wav")
    companded = encode_mulaw(soxr.resample(np.frombuffer(pcm, dtype="<i2"), rate, 8000).astype(np.int16))
    mulaw = final_text(
        stream(sphinx_server, chunks(companded, 800), streaming_config(8000, riva.client.AudioEncoding.MULAW))
    )
    linear = final_text(
        stream(sphinx_server, chunks(decode_mulaw(companded).astype("<i2").tobytes(), 1600), streaming_config(8000))
    )
    assert mulaw == linear and mulaw.split()


def test_large_audio_messages_are_accepted(sphinx_server: ServerProcess) -> None:
    pcm, rate = read_wav_pcm("librivox_amiable_woman.wav")  # ~190 KB in one message, above voxgate's 64 KiB
    text = final_text(stream(sphinx_server, [pcm], streaming_config(rate, interim=False)))
    assert (
        word_error_rate(
            "had he married a more a amiable woman he might have been made still more respectable than he was", text
        )
        <= MAX_WER
    )


def test_offline_recognize(sphinx_server: ServerProcess) -> None:
    pcm, rate = read_wav_pcm("cards_eight_of_spades.wav")
    response = asr(sphinx_server).offline_recognize(pcm, streaming_config(rate).config)
    assert len(response.results) == 1  # the pauses between the cards are shorter than the endpointing silence
    # The engine's own final hypothesis ("eight of spades for up close seven of hearts": WER 0.33).
    assert (
        response.results[0].alternatives[0].transcript.split() == sphinx_final(engine_samples(pcm, "linear16")).split()
    )
    assert all(r.alternatives[0].words for r in response.results)


def test_config_rpc_lists_online_and_offline_models(sphinx_server: ServerProcess) -> None:
    response = asr(sphinx_server).stub.GetRivaSpeechRecognitionConfig(rasr.RivaSpeechRecognitionConfigRequest())
    kinds = {(c.parameters["type"], c.parameters["language_code"]) for c in response.model_config}
    assert {("online", "en-US"), ("offline", "en-US")} <= kinds
    name = response.model_config[0].model_name
    one = asr(sphinx_server).stub.GetRivaSpeechRecognitionConfig(
        rasr.RivaSpeechRecognitionConfigRequest(model_name=name)
    )
    assert [c.model_name for c in one.model_config] == [name]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"encoding": riva.client.AudioEncoding.FLAC}, "streaming_config.config.encoding"),
        ({"sample_rate_hertz": 4000}, "streaming_config.config.sample_rate_hertz"),
        ({"audio_channel_count": 9}, "streaming_config.config.audio_channel_count"),
    ],
)
def test_unsupported_audio_is_invalid_argument_naming_the_riva_field(
    sphinx_server: ServerProcess, change: dict, field: str
) -> None:
    config = streaming_config()
    for key, value in change.items():
        setattr(config.config, key, value)
    with pytest.raises(grpc.RpcError) as info:
        stream(sphinx_server, [silence(0.1)], config)
    code, reason, meta = error_reason(info.value)
    assert (code, reason, meta.get("field")) == (grpc.StatusCode.INVALID_ARGUMENT, "UNSUPPORTED_AUDIO_FORMAT", field)


def test_odd_length_pcm_is_invalid_audio(sphinx_server: ServerProcess) -> None:
    with pytest.raises(grpc.RpcError) as info:
        stream(sphinx_server, [b"\0" * 321], streaming_config())
    code, reason, meta = error_reason(info.value)
    assert (code, reason, meta.get("field")) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_AUDIO", "audio_content")


@pytest.mark.parametrize(
    "requests",
    [
        [rasr.StreamingRecognizeRequest(audio_content=b"\0\0" * 160)],
        [
            rasr.StreamingRecognizeRequest(streaming_config=streaming_config()),
            rasr.StreamingRecognizeRequest(streaming_config=streaming_config()),
        ],
    ],
    ids=["audio-first", "second-config"],
)
def test_requests_out_of_order_are_failed_precondition(
    sphinx_server: ServerProcess, requests: list[rasr.StreamingRecognizeRequest]
) -> None:
    with pytest.raises(grpc.RpcError) as info:
        list(asr(sphinx_server).stub.StreamingRecognize(iter(requests), timeout=30))
    code, reason, _ = error_reason(info.value)
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "PROTOCOL_ORDER")


def test_a_vanished_client_frees_its_session_at_once(sphinx_server: ServerProcess) -> None:
    # Riva cannot resume a stream, so its session must not wait out voxgate's resume window.
    def stalled() -> Iterator[rasr.StreamingRecognizeRequest]:
        yield rasr.StreamingRecognizeRequest(streaming_config=streaming_config())
        yield rasr.StreamingRecognizeRequest(audio_content=silence(0.5))
        time.sleep(3)

    with pytest.raises(grpc.RpcError) as info:
        list(asr(sphinx_server).stub.StreamingRecognize(stalled(), timeout=1.0))
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    deadline = time.monotonic() + 5
    while sphinx_server.stub().GetCapabilities(pb.GetCapabilitiesRequest(), timeout=5).active_sessions:
        assert time.monotonic() < deadline, "the abandoned session still holds a slot"
        time.sleep(0.1)


def test_an_undecodable_first_request_is_malformed_request(sphinx_server: ServerProcess) -> None:
    got, err = raw_stream(sphinx_server, RIVA_STREAM, rasr.StreamingRecognizeResponse.FromString, [GARBAGE])
    assert not got and err is not None
    assert error_reason(err)[:2] == (grpc.StatusCode.INVALID_ARGUMENT, "MALFORMED_REQUEST")


def test_an_undecodable_request_mid_stream_ends_the_session_with_its_finals(sphinx_server: ServerProcess) -> None:
    pcm, rate = read_wav_pcm("go_forward.wav")
    requests = [
        rasr.StreamingRecognizeRequest(streaming_config=streaming_config(rate)).SerializeToString(),
        *(
            rasr.StreamingRecognizeRequest(audio_content=c).SerializeToString()
            for c in chunks(pcm + silence(0.5), 3200)
        ),
        GARBAGE,
    ]
    got, err = raw_stream(sphinx_server, RIVA_STREAM, rasr.StreamingRecognizeResponse.FromString, requests)
    assert err is not None, "the stream must end with a status, not hang"
    assert error_reason(err)[:2] == (grpc.StatusCode.INVALID_ARGUMENT, "MALFORMED_REQUEST")
    assert word_error_rate(GO_FORWARD, final_text([r for resp in got for r in resp.results])) <= MAX_WER
