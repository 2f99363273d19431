"""Client input the server must not echo without bound, and small protocol corners, through every API.

A language_code of 8 KB or 1 MB is INVALID_ARGUMENT / INVALID_CONFIG with a
short message on the voxgate, Riva and Google endpoints, and no server log line
grows past the log bound.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import grpc
import pytest
import riva.client
from google.api_core import exceptions
from google.cloud import speech_v1 as speech
from google.cloud.speech_v1.services.speech.transports import SpeechGrpcTransport

from service.logs import MAX_LINE_CHARS
from tests.helpers import ServerProcess, config_request, error_reason, start_server

LONG_CODES = {"8KB": "x" * 8 * 1024, "1MB": "en-US" + "x" * (1 << 20)}
SHORT_MESSAGE = 300  # characters: the status names the field and the bound, not the value


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path_factory.mktemp("input"), "--max-message-bytes", str(4 << 20))
    yield proc
    proc.stop()


def voxgate_error(server: ServerProcess, language_code: str) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        list(server.stub().StreamingRecognize(iter([config_request(language_code=language_code)]), timeout=30))
    return err.value


def riva_error(server: ServerProcess, language_code: str) -> grpc.RpcError:
    config = riva.client.StreamingRecognitionConfig(
        config=riva.client.RecognitionConfig(
            encoding=riva.client.AudioEncoding.LINEAR_PCM,
            sample_rate_hertz=16000,
            language_code=language_code,
            max_alternatives=1,
            audio_channel_count=1,
        ),
        interim_results=True,
    )
    service = riva.client.ASRService(riva.client.Auth(uri=server.target))
    with pytest.raises(grpc.RpcError) as err:
        list(service.streaming_response_generator(audio_chunks=[b"\0" * 3200], streaming_config=config))
    return err.value


def google_client(server: ServerProcess) -> speech.SpeechClient:
    return speech.SpeechClient(transport=SpeechGrpcTransport(channel=grpc.insecure_channel(server.target)))


@pytest.mark.parametrize("size", LONG_CODES)
@pytest.mark.parametrize(
    ("api", "call", "field"),
    [
        ("voxgate", voxgate_error, "config.language_code"),
        ("riva", riva_error, "streaming_config.config.language_code"),
    ],
    ids=["voxgate", "riva"],
)
def test_an_overlong_language_code_is_invalid_config_with_a_short_message(
    server: ServerProcess, api: str, call: Callable[[ServerProcess, str], grpc.RpcError], field: str, size: str
) -> None:
    err = call(server, LONG_CODES[size])
    code, reason, meta = error_reason(err)
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_CONFIG"), (code, err.details()[:200])
    assert meta.get("field") == field
    assert len(err.details()) < SHORT_MESSAGE and "35 characters" in err.details(), err.details()


@pytest.mark.parametrize("size", LONG_CODES)
def test_an_overlong_language_code_on_google_recognize_is_invalid_argument(server: ServerProcess, size: str) -> None:
    config = speech.RecognitionConfig(
        encoding=speech.RecognitionConfig.AudioEncoding.LINEAR16,
        sample_rate_hertz=16000,
        language_code=LONG_CODES[size],
    )
    with pytest.raises(exceptions.InvalidArgument) as err:
        google_client(server).recognize(
            config=config, audio=speech.RecognitionAudio(content=b"\0" * 3200), retry=None, timeout=30
        )
    assert len(err.value.message) < SHORT_MESSAGE and "language_code" in err.value.message


def test_a_valid_language_tag_still_names_the_supported_ones(server: ServerProcess) -> None:
    err = voxgate_error(server, "fr-FR")
    assert error_reason(err)[:2] == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_CONFIG")
    assert "'fr-FR' not supported; supported: en-US" in err.details()


def test_no_server_log_line_goes_past_the_bound(server: ServerProcess) -> None:
    for code in LONG_CODES.values():  # whatever ran before in this module, once more
        voxgate_error(server, code)
    time.sleep(0.5)
    lines = server.log().splitlines()
    assert lines and max(len(line) for line in lines) <= MAX_LINE_CHARS
    for line in lines:
        if line.startswith("{"):
            json.loads(line)  # cut fields leave valid JSON
    assert not any("x" * 2048 in line for line in lines)


def test_google_recognize_without_audio_names_audio_content(server: ServerProcess) -> None:
    config = speech.RecognitionConfig(
        encoding=speech.RecognitionConfig.AudioEncoding.LINEAR16, sample_rate_hertz=16000, language_code="en-US"
    )
    with pytest.raises(exceptions.InvalidArgument) as err:
        google_client(server).recognize(config=config, audio=speech.RecognitionAudio(), retry=None, timeout=30)
    assert err.value.metadata == {"field": "audio.content"} and "audio.uri" not in err.value.message
    with pytest.raises(exceptions.InvalidArgument) as err:
        google_client(server).recognize(
            config=config, audio=speech.RecognitionAudio(uri="gs://bucket/a.wav"), retry=None, timeout=30
        )
    assert "audio.uri" in err.value.message


def test_a_stream_with_no_requests_is_told_it_sent_no_config(server: ServerProcess) -> None:
    with pytest.raises(grpc.RpcError) as err:
        list(server.stub().StreamingRecognize(iter([]), timeout=30))
    code, reason, _ = error_reason(err.value)
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "PROTOCOL_ORDER"), err.value.details()
    assert "config" in err.value.details()
