"""The Google Speech-to-Text v1 endpoint (google.cloud.speech.v1.Speech), driven by the unmodified
google-cloud-speech client over an insecure local channel."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from google.api_core import exceptions
from google.cloud import speech_v1 as speech
from google.cloud.speech_v1.services.speech.transports import SpeechGrpcTransport

from bench.wer import engine_chunks, engine_samples, sphinx_final, whisper_final
from tests.helpers import ServerProcess, error_reason, paced, read_wav_pcm, silence, word_error_rate
from tests.raw_wire import GARBAGE, GOOGLE_STREAM, raw_stream
from voxgate_client.g711 import encode_mulaw

MAX_WER = 0.25
# service.compat.adapter.REVISABLE_STABILITY (the service's compat protos cannot be imported next to the vendor's)
REVISABLE_STABILITY = 0.5
GO_FORWARD = "go forward ten meters"
Encoding = speech.RecognitionConfig.AudioEncoding
Event = speech.StreamingRecognizeResponse.SpeechEventType


def direct_final(engine: str, pcm: bytes) -> str:
    """The engine's model alone on the samples voxgate's engine gets for this 16 kHz audio."""
    if engine == "sphinx":
        return sphinx_final(engine_samples(pcm, "linear16"))
    return whisper_final(engine_chunks(pcm, "linear16"))


def client(server: ServerProcess) -> speech.SpeechClient:
    return speech.SpeechClient(transport=SpeechGrpcTransport(channel=grpc.insecure_channel(server.target)))


def streaming_config(
    rate: int = 16000, encoding: Encoding = Encoding.LINEAR16, **kwargs: object
) -> speech.StreamingRecognitionConfig:
    options: dict[str, object] = {"interim_results": True}
    options.update(kwargs)
    return speech.StreamingRecognitionConfig(
        config=speech.RecognitionConfig(
            encoding=encoding,
            sample_rate_hertz=rate,
            language_code="en-US",
            enable_word_time_offsets=True,
            enable_automatic_punctuation=True,
            model="phone_call",
        ),
        **options,
    )


def requests(audio: Iterator[bytes] | list[bytes]) -> Iterator[speech.StreamingRecognizeRequest]:
    return (speech.StreamingRecognizeRequest(audio_content=chunk) for chunk in audio)


def chunks(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def stream(
    server: ServerProcess, config: speech.StreamingRecognitionConfig, audio: Iterator[bytes] | list[bytes]
) -> list[speech.StreamingRecognizeResponse]:
    return list(client(server).streaming_recognize(config, requests(audio), retry=None, timeout=120))


def results(responses: list[speech.StreamingRecognizeResponse]) -> list[speech.StreamingRecognitionResult]:
    return [r for response in responses for r in response.results]


def final_text(responses: list[speech.StreamingRecognizeResponse]) -> str:
    return " ".join(r.alternatives[0].transcript for r in results(responses) if r.is_final).strip()


def test_streaming_interims_final_stability_and_word_offsets(sphinx_server: ServerProcess) -> None:
    pcm, rate = read_wav_pcm("go_forward.wav")
    audio = paced(chunks(pcm + silence(1.0), rate // 10 * 2), 0.1)  # 100 ms chunks, real time
    responses = stream(sphinx_server, streaming_config(), audio)

    assert word_error_rate(GO_FORWARD, final_text(responses)) <= MAX_WER
    all_results = results(responses)
    first_final = next(i for i, r in enumerate(all_results) if r.is_final)
    interims = all_results[:first_final]
    assert interims, "interim results come before the final one"
    # PocketSphinx's final may revise what its interims showed: they say so with a stability below 1.
    assert all(r.stability == pytest.approx(REVISABLE_STABILITY) and not r.alternatives[0].words for r in interims)
    texts = [r.alternatives[0].transcript for r in interims]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:], strict=False))
    final = all_results[first_final]
    assert final.language_code.lower() == "en-us"

    words = final.alternatives[0].words
    assert [w.word for w in words] == final.alternatives[0].transcript.split()
    duration_s = len(pcm) / 2 / rate
    for w in words:  # proto-plus gives timedelta offsets
        assert 0 <= w.start_time.total_seconds() < w.end_time.total_seconds() <= duration_s + 0.05
    assert final.result_end_time.total_seconds() == pytest.approx(words[-1].end_time.total_seconds())


@pytest.mark.parametrize("engine", ["sphinx", "whisper"])
def test_the_final_is_the_engines_own_hypothesis(engine: str, request: pytest.FixtureRequest) -> None:
    server: ServerProcess = request.getfixturevalue(f"{engine}_server")
    # go_forward on sphinx: the interims show "... ten meters", the decoder's final pass says "... ten years".
    pcm, rate = read_wav_pcm("go_forward.wav")
    finals = [r for r in results(stream(server, streaming_config(rate), chunks(pcm, 3200))) if r.is_final]
    assert len(finals) == 1  # no pause in the clip reaches the default endpointing silence
    assert finals[0].alternatives[0].transcript.split() == direct_final(engine, pcm).split()


def test_mulaw_and_voice_activity_events(sphinx_server: ServerProcess) -> None:
    pcm, rate = read_wav_pcm("flite_rms_turn_left.wav")
    mulaw = encode_mulaw(np.frombuffer(pcm, dtype="<i2"))
    responses = stream(
        sphinx_server,
        streaming_config(rate, Encoding.MULAW, interim_results=False, enable_voice_activity_events=True),
        chunks(mulaw, 1600),
    )
    assert word_error_rate("turn left at the next intersection", final_text(responses)) <= MAX_WER
    assert all(r.is_final for r in results(responses))
    events = [(r.speech_event_type, r.speech_event_time.total_seconds()) for r in responses if r.speech_event_type]
    assert [kind for kind, _ in events] == [Event.SPEECH_ACTIVITY_BEGIN, Event.SPEECH_ACTIVITY_END]
    assert 0 <= events[0][1] < events[1][1] <= len(pcm) / 2 / rate + 0.05


def test_single_utterance_ends_the_stream_after_the_first_utterance(sphinx_server: ServerProcess) -> None:
    first, rate = read_wav_pcm("go_forward.wav")
    second, _ = read_wav_pcm("cards_eight_of_spades.wav")
    audio = chunks(first + silence(1.5) + second + silence(1.0), rate // 10 * 2)
    sent = 0

    def counted() -> Iterator[bytes]:
        nonlocal sent
        for chunk in paced(audio, 0.05):  # twice real time
            sent += 1
            yield chunk

    responses = stream(sphinx_server, streaming_config(single_utterance=True), counted())
    kinds = [r.speech_event_type for r in responses if r.speech_event_type]
    assert kinds == [Event.END_OF_SINGLE_UTTERANCE]
    event_at = next(i for i, r in enumerate(responses) if r.speech_event_type)
    final_at = [i for i, r in enumerate(responses) for res in r.results if res.is_final]
    assert len(final_at) == 1 and final_at[0] > event_at, "one final result, after END_OF_SINGLE_UTTERANCE"
    assert word_error_rate(GO_FORWARD, final_text(responses)) <= MAX_WER
    assert sent < len(audio), "the server ended the stream while the client still had audio to send"


def test_unary_recognize(sphinx_server: ServerProcess) -> None:
    pcm, rate = read_wav_pcm("cards_eight_of_spades.wav")
    config = streaming_config(rate).config
    response = client(sphinx_server).recognize(
        config=config, audio=speech.RecognitionAudio(content=pcm), retry=None, timeout=120
    )
    assert len(response.results) == 1  # the pauses between the cards are shorter than the endpointing silence
    # The engine's own final hypothesis ("eight of spades for up close seven of hearts": WER 0.33).
    assert (
        response.results[0].alternatives[0].transcript.split() == sphinx_final(engine_samples(pcm, "linear16")).split()
    )
    assert all(r.alternatives[0].words for r in response.results)

    with pytest.raises(exceptions.InvalidArgument) as info:
        client(sphinx_server).recognize(
            config=config, audio=speech.RecognitionAudio(uri="gs://bucket/a.wav"), retry=None, timeout=30
        )
    assert info.value.metadata == {"field": "audio.uri"}


@pytest.mark.parametrize(
    ("config", "reason", "field"),
    [
        (streaming_config(encoding=Encoding.FLAC), "UNSUPPORTED_AUDIO_FORMAT", "streaming_config.config.encoding"),
        (streaming_config(rate=96000), "UNSUPPORTED_AUDIO_FORMAT", "streaming_config.config.sample_rate_hertz"),
        (
            speech.StreamingRecognitionConfig(
                config=speech.RecognitionConfig(
                    encoding=Encoding.LINEAR16, sample_rate_hertz=16000, language_code="tlh"
                )
            ),
            "INVALID_CONFIG",
            "streaming_config.config.language_code",
        ),
    ],
)
def test_bad_config_is_invalid_argument_with_error_info(
    sphinx_server: ServerProcess, config: speech.StreamingRecognitionConfig, reason: str, field: str
) -> None:
    with pytest.raises(exceptions.InvalidArgument) as info:
        stream(sphinx_server, config, [silence(0.1)])
    assert info.value.grpc_status_code == grpc.StatusCode.INVALID_ARGUMENT
    assert (info.value.reason, info.value.domain, info.value.metadata) == (reason, "voxgate.dev", {"field": field})


def test_reflection_describes_both_compat_services(sphinx_server: ServerProcess) -> None:
    grpcurl = str(Path(sys.executable).parent / "grpcurl")
    listed = subprocess.run(
        [grpcurl, "-plaintext", sphinx_server.target, "list"], capture_output=True, text=True, timeout=30
    )
    assert {"google.cloud.speech.v1.Speech", "nvidia.riva.asr.RivaSpeechRecognition"} <= set(listed.stdout.split())
    described = subprocess.run(
        [grpcurl, "-plaintext", sphinx_server.target, "describe", "google.cloud.speech.v1.Speech"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert "returns ( stream .google.cloud.speech.v1.StreamingRecognizeResponse )" in described.stdout, described.stderr


def test_an_undecodable_first_request_is_malformed_request(sphinx_server: ServerProcess) -> None:
    got, err = raw_stream(sphinx_server, GOOGLE_STREAM, speech.StreamingRecognizeResponse.deserialize, [GARBAGE])
    assert not got and err is not None
    assert error_reason(err)[:2] == (grpc.StatusCode.INVALID_ARGUMENT, "MALFORMED_REQUEST")


def test_an_undecodable_request_mid_stream_ends_the_session_with_its_finals(sphinx_server: ServerProcess) -> None:
    pcm, rate = read_wav_pcm("go_forward.wav")
    serialize = speech.StreamingRecognizeRequest.serialize
    raw = [
        serialize(speech.StreamingRecognizeRequest(streaming_config=streaming_config(rate))),
        *(serialize(r) for r in requests(chunks(pcm + silence(0.5), 3200))),
        GARBAGE,
    ]
    got, err = raw_stream(sphinx_server, GOOGLE_STREAM, speech.StreamingRecognizeResponse.deserialize, raw)
    assert err is not None, "the stream must end with a status, not hang"
    assert error_reason(err)[:2] == (grpc.StatusCode.INVALID_ARGUMENT, "MALFORMED_REQUEST")
    text = " ".join(r.alternatives[0].transcript for resp in got for r in resp.results if r.is_final)
    assert word_error_rate(GO_FORWARD, text) <= MAX_WER
