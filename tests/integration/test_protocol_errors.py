"""Bad input gets a precise status and reason, and never disturbs a healthy session."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
import pytest

from tests.helpers import ServerProcess, audio_requests, config_request, error_reason, recognize, voiced
from tests.raw_wire import GARBAGE, VOXGATE_STREAM, config_with_bad_utf8, raw_stream, raw_unary
from voxgate_client.v1 import speech_pb2 as pb


def fail(server: ServerProcess, requests: list[pb.StreamingRecognizeRequest]) -> tuple[grpc.StatusCode, str, dict]:
    with pytest.raises(grpc.RpcError) as info:
        recognize(server.stub(), requests, timeout=30)
    return error_reason(info.value)


def test_audio_before_config_is_protocol_order(fake_server: ServerProcess) -> None:
    code, reason, _ = fail(fake_server, [pb.StreamingRecognizeRequest(audio=b"\0\0" * 160)])
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "PROTOCOL_ORDER")


def test_second_config_is_protocol_order(fake_server: ServerProcess) -> None:
    code, reason, _ = fail(fake_server, [config_request(), config_request()])
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "PROTOCOL_ORDER")


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"encoding": pb.AUDIO_ENCODING_UNSPECIFIED}, "config.encoding"),
        ({"encoding": 17}, "config.encoding"),
        ({"sample_rate_hz": 7999}, "config.sample_rate_hz"),
        ({"sample_rate_hz": 96000}, "config.sample_rate_hz"),
        ({"audio_channel_count": 9}, "config.audio_channel_count"),
    ],
)
def test_unsupported_format_names_the_field(fake_server: ServerProcess, config: dict, field: str) -> None:
    code, reason, meta = fail(fake_server, [config_request(**config)])
    assert (code, reason, meta.get("field")) == (grpc.StatusCode.INVALID_ARGUMENT, "UNSUPPORTED_AUDIO_FORMAT", field)


def test_invalid_config_values_name_the_field(fake_server: ServerProcess) -> None:
    code, reason, meta = fail(fake_server, [config_request(endpointing=pb.EndpointingConfig(silence_ms=-5))])
    assert (code, reason, meta["field"]) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_CONFIG",
        "config.endpointing.silence_ms",
    )
    code, reason, meta = fail(fake_server, [config_request(language_code="tlh")])
    assert (code, reason, meta["field"]) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_CONFIG", "config.language_code")


def test_odd_length_linear16_is_invalid_audio(fake_server: ServerProcess) -> None:
    code, reason, _ = fail(fake_server, [config_request(), pb.StreamingRecognizeRequest(audio=b"\0" * 321)])
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_AUDIO")


def test_g711_of_any_size_is_accepted(fake_server: ServerProcess) -> None:
    requests = [config_request(encoding=pb.AUDIO_ENCODING_MULAW, sample_rate_hz=8000)]
    requests += [pb.StreamingRecognizeRequest(audio=b"\xff" * n) for n in (1, 7, 161, 333)]
    responses = recognize(fake_server.stub(), requests)
    assert responses[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END
    assert round(responses[-1].ended.audio_duration.ToMilliseconds()) == pytest.approx(63, abs=21)


def test_audio_message_over_the_limit_is_a_clear_error(fake_server: ServerProcess) -> None:
    code, reason, _ = fail(fake_server, [config_request(), pb.StreamingRecognizeRequest(audio=b"\0" * 65538)])
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "AUDIO_MESSAGE_TOO_LARGE")


def test_message_over_the_transport_limit_is_resource_exhausted(fake_server: ServerProcess) -> None:
    with pytest.raises(grpc.RpcError) as info:
        recognize(fake_server.stub(), [config_request(), pb.StreamingRecognizeRequest(audio=b"\0" * 5_000_000)])
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max" in info.value.details()


def test_empty_request_is_protocol_order(fake_server: ServerProcess) -> None:
    code, reason, _ = fail(fake_server, [config_request(), pb.StreamingRecognizeRequest()])
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "PROTOCOL_ORDER")


def test_errors_keep_finals_already_earned(fake_server: ServerProcess) -> None:
    """A bad message mid-utterance still delivers the final result of the audio before it."""
    got: list[pb.StreamingRecognizeResponse] = []

    def requests() -> Iterator[pb.StreamingRecognizeRequest]:
        yield config_request()
        yield from audio_requests(voiced(1.5))
        yield pb.StreamingRecognizeRequest(audio=b"\0")

    with pytest.raises(grpc.RpcError) as info:
        for r in fake_server.stub().StreamingRecognize(requests(), timeout=30):
            got.append(r)
    assert error_reason(info.value)[1] == "INVALID_AUDIO"
    finals = [r.result for r in got if r.HasField("result") and r.result.is_final]
    assert finals and finals[-1].text.startswith("alpha")
    assert got[-1].ended.reason == pb.SESSION_END_REASON_ERROR


def test_bad_clients_do_not_disturb_a_healthy_session(fake_server: ServerProcess) -> None:
    healthy: list[pb.StreamingRecognizeResponse] = []

    def run_healthy() -> None:
        def paced() -> Iterator[pb.StreamingRecognizeRequest]:
            yield config_request()
            for req in audio_requests(voiced(3.0), 3200):
                threading.Event().wait(0.02)
                yield req

        healthy.extend(recognize(fake_server.stub(), paced()))

    thread = threading.Thread(target=run_healthy)
    thread.start()
    bad_batches = [
        [pb.StreamingRecognizeRequest(audio=b"\0\0")],
        [config_request(sample_rate_hz=1)],
        [config_request(), pb.StreamingRecognizeRequest(audio=b"\0" * 3)],
        [config_request(), pb.StreamingRecognizeRequest(audio=b"\0" * 70000)],
    ]
    for batch in bad_batches * 3:
        with pytest.raises(grpc.RpcError):
            recognize(fake_server.stub(), batch, timeout=30)
    thread.join(60)
    assert healthy[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END
    text = " ".join(r.result.text for r in healthy if r.HasField("result") and r.result.is_final)
    assert text.split() == ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf"][: len(text.split())]
    assert len(text.split()) >= 6
    assert fake_server.proc.poll() is None


def _speech_requests(seconds: float) -> list[bytes]:
    return [config_request().SerializeToString(), *(r.SerializeToString() for r in audio_requests(voiced(seconds)))]


@pytest.mark.parametrize("first", [GARBAGE, config_with_bad_utf8()], ids=["not-protobuf", "bad-utf8"])
def test_an_undecodable_first_request_is_malformed_request(fake_server: ServerProcess, first: bytes) -> None:
    got, err = raw_stream(fake_server, VOXGATE_STREAM, pb.StreamingRecognizeResponse.FromString, [first])
    assert not got and err is not None
    assert error_reason(err)[:2] == (grpc.StatusCode.INVALID_ARGUMENT, "MALFORMED_REQUEST")


def test_an_undecodable_request_mid_stream_ends_the_session_with_its_finals(fake_server: ServerProcess) -> None:
    """The audio before the bad message is final before the status; the session's slot is free at once."""
    got, err = raw_stream(
        fake_server,
        VOXGATE_STREAM,
        pb.StreamingRecognizeResponse.FromString,
        [*_speech_requests(1.5), GARBAGE],
        timeout=20,
    )
    assert err is not None, "the stream must end with a status, not hang"
    assert error_reason(err)[:2] == (grpc.StatusCode.INVALID_ARGUMENT, "MALFORMED_REQUEST")
    finals = [r.result for r in got if r.HasField("result") and r.result.is_final]
    assert finals and finals[-1].text.split() == ["alpha", "bravo", "charlie"]
    assert got[-1].ended.reason == pb.SESSION_END_REASON_ERROR
    caps = fake_server.stub().GetCapabilities(pb.GetCapabilitiesRequest(), timeout=10)
    assert caps.active_sessions == 0 and caps.capacity.service_sessions == 0


@pytest.mark.parametrize(
    "method",
    [
        "/voxgate.v1.Speech/GetCapabilities",
        "/google.cloud.speech.v1.Speech/Recognize",
        "/nvidia.riva.asr.RivaSpeechRecognition/Recognize",
    ],
    ids=["voxgate-capabilities", "google-recognize", "riva-recognize"],
)
def test_an_undecodable_unary_request_is_malformed_request(fake_server: ServerProcess, method: str) -> None:
    # gRPC decodes a unary request before any handler runs; left alone that is UNKNOWN with no reason.
    err = raw_unary(fake_server, method, GARBAGE)
    assert err is not None
    assert error_reason(err)[:2] == (grpc.StatusCode.INVALID_ARGUMENT, "MALFORMED_REQUEST")
    assert raw_unary(fake_server, "/voxgate.v1.Speech/GetCapabilities", b"") is None  # a valid empty request
