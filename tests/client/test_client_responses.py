"""Response, capabilities and error conversion to plain dicts."""

import json

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from voxgate_client import error_details, format_error, response_to_dict
from voxgate_client.responses import capabilities_to_dict
from voxgate_client.v1 import speech_pb2 as pb


def dur(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(round(seconds * 1e9))
    return d


def roundtrip(response: pb.StreamingRecognizeResponse) -> dict:
    out = response_to_dict(response)
    assert json.loads(json.dumps(out)) == out  # JSON-able as is
    return out


def test_started():
    config = pb.StreamingConfig(
        encoding=pb.AUDIO_ENCODING_MULAW,
        sample_rate_hz=8000,
        audio_channel_count=1,
        language_code="en-US",
        interim_results=True,
        endpointing=pb.EndpointingConfig(silence_ms=600),
    )
    limits = pb.SessionLimits(max_duration=dur(3600), idle_timeout=dur(30))
    msg = pb.StreamingRecognizeResponse(
        seq=1,
        started=pb.SessionStarted(
            session_id="s-1",
            effective_config=config,
            engine=pb.EngineInfo(name="sphinx", model="en-us"),
            limits=limits,
            max_audio_bytes_per_message=65536,
            position_mode=pb.POSITION_MODE_ROLLOVER,
            position_mode_reason="turned off (--no-reanchor)",
            interim_stability=pb.INTERIM_STABILITY_REVISABLE,
        ),
    )
    assert roundtrip(msg) == {
        "seq": 1,
        "type": "started",
        "session_id": "s-1",
        "engine": {"name": "sphinx", "model": "en-us"},
        "effective_config": {
            "encoding": "mulaw",
            "sample_rate_hz": 8000,
            "audio_channel_count": 1,
            "language_code": "en-US",
            "interim_results": True,
            "enable_word_time_offsets": False,
            "endpointing_silence_ms": 600,
            "limits": {"max_duration_s": 0.0, "idle_timeout_s": 0.0},
        },
        "limits": {"max_duration_s": 3600.0, "idle_timeout_s": 30.0},
        "max_audio_bytes_per_message": 65536,
        "resumed": False,
        "position_mode": "rollover",
        "position_mode_reason": "turned off (--no-reanchor)",
        "interim_stability": "revisable",
    }


def test_result_without_and_with_words():
    result = pb.RecognitionResult(
        result_id="r-0",
        utterance_index=0,
        is_final=False,
        text="hello",
        delta="hello",
        start_offset=dur(12.34),
        end_offset=dur(15.6),
    )
    msg = pb.StreamingRecognizeResponse(seq=2, result=result)
    assert roundtrip(msg) == {
        "seq": 2,
        "type": "result",
        "result_id": "r-0",
        "utterance_index": 0,
        "is_final": False,
        "text": "hello",
        "delta": "hello",
        "start_s": 12.34,
        "end_s": 15.6,
    }
    result.is_final = True
    result.words.add(word="hello", start_offset=dur(12.34), end_offset=dur(12.8))
    out = roundtrip(pb.StreamingRecognizeResponse(seq=3, result=result))
    assert out["is_final"] is True
    assert out["words"] == [{"word": "hello", "start_s": 12.34, "end_s": 12.8}]
    assert "revised" not in out
    result.revised = True  # a final that replaces the utterance's interim text
    assert roundtrip(pb.StreamingRecognizeResponse(seq=4, result=result))["revised"] is True


def test_speech_events():
    for kind, name in [
        (pb.SPEECH_EVENT_TYPE_SPEECH_STARTED, "speech_started"),
        (pb.SPEECH_EVENT_TYPE_SPEECH_ENDED, "speech_ended"),
    ]:
        msg = pb.StreamingRecognizeResponse(seq=4, speech_event=pb.SpeechEvent(type=kind, offset=dur(1.5)))
        assert roundtrip(msg) == {
            "seq": 4,
            "type": "speech_event",
            "event": name,
            "offset_s": 1.5,
        }


def test_ended_reasons():
    expected = {
        pb.SESSION_END_REASON_CLIENT_END: "client_end",
        pb.SESSION_END_REASON_MAX_DURATION: "max_duration",
        pb.SESSION_END_REASON_IDLE_TIMEOUT: "idle_timeout",
        pb.SESSION_END_REASON_DRAINING: "draining",
        pb.SESSION_END_REASON_ENGINE_LOST: "engine_lost",
        pb.SESSION_END_REASON_ERROR: "error",
    }
    for reason, name in expected.items():
        msg = pb.StreamingRecognizeResponse(
            seq=9,
            ended=pb.SessionEnded(reason=reason, message="bye", audio_duration=dur(2.25)),
        )
        assert roundtrip(msg) == {
            "seq": 9,
            "type": "ended",
            "reason": name,
            "message": "bye",
            "audio_duration_s": 2.25,
        }


def test_warning_and_unknown():
    msg = pb.StreamingRecognizeResponse(seq=5, warning=pb.Warning(code="IDLE_WARNING", message="no audio for 20s"))
    assert roundtrip(msg) == {
        "seq": 5,
        "type": "warning",
        "code": "IDLE_WARNING",
        "message": "no audio for 20s",
    }
    assert roundtrip(pb.StreamingRecognizeResponse(seq=6)) == {"seq": 6, "type": "unknown"}


def test_capabilities():
    caps = pb.GetCapabilitiesResponse(
        encodings=[pb.AUDIO_ENCODING_LINEAR16, pb.AUDIO_ENCODING_ALAW],
        min_sample_rate_hz=8000,
        max_sample_rate_hz=48000,
        languages=["en-US"],
        engine=pb.EngineInfo(name="fake"),
        max_sessions=4,
    )
    out = capabilities_to_dict(caps)
    assert out["encodings"] == ["linear16", "alaw"]
    assert out["engine"] == {"name": "fake", "model": ""}
    assert out["max_sessions"] == 4
    json.dumps(out)


class FakeRpcError(grpc.RpcError):
    def __init__(self, code, details, trailing=()):
        self._code, self._details, self._trailing = code, details, trailing

    def code(self):
        return self._code

    def details(self):
        return self._details

    def trailing_metadata(self):
        return self._trailing


def packed(message) -> any_pb2.Any:
    a = any_pb2.Any()
    a.Pack(message)
    return a


def test_error_details_with_rich_status():
    status = status_pb2.Status(
        code=code_pb2.UNAVAILABLE,
        message="no free engine slot",
        details=[
            packed(
                error_details_pb2.ErrorInfo(reason="CAPACITY", domain="voxgate.dev", metadata={"max_sessions": "4"})
            ),
            packed(error_details_pb2.RetryInfo(retry_delay=dur(2))),
        ],
    )
    err = FakeRpcError(
        grpc.StatusCode.UNAVAILABLE,
        "no free engine slot",
        (("grpc-status-details-bin", status.SerializeToString()),),
    )
    out = error_details(err)
    assert out == {
        "code": "UNAVAILABLE",
        "message": "no free engine slot",
        "reason": "CAPACITY",
        "domain": "voxgate.dev",
        "metadata": {"max_sessions": "4"},
        "retry_delay_s": 2.0,
    }
    assert format_error(out) == "UNAVAILABLE (CAPACITY): no free engine slot; retry in 2s"


def test_error_details_with_bad_request():
    bad = error_details_pb2.BadRequest()
    bad.field_violations.add(field="config.sample_rate_hz", description="must be 8000..48000")
    status = status_pb2.Status(code=3, message="bad config", details=[packed(bad)])
    err = FakeRpcError(
        grpc.StatusCode.INVALID_ARGUMENT,
        "bad config",
        (("grpc-status-details-bin", status.SerializeToString()),),
    )
    out = error_details(err)
    assert out["field_violations"] == [{"field": "config.sample_rate_hz", "description": "must be 8000..48000"}]
    assert "config.sample_rate_hz: must be 8000..48000" in format_error(out)


def test_error_details_falls_back_to_code_and_details():
    plain = FakeRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, "too slow")
    assert error_details(plain) == {"code": "DEADLINE_EXCEEDED", "message": "too slow"}
    garbage = FakeRpcError(grpc.StatusCode.INTERNAL, "boom", (("grpc-status-details-bin", b"\xff\xff"),))
    assert error_details(garbage) == {"code": "INTERNAL", "message": "boom"}
