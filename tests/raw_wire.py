"""Raw bytes on the wire: requests that are not valid protobuf, sent through a real gRPC channel."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import grpc

from tests.helpers import ServerProcess
from voxgate_client.v1 import speech_pb2 as pb

VOXGATE_STREAM = "/voxgate.v1.Speech/StreamingRecognize"
RIVA_STREAM = "/nvidia.riva.asr.RivaSpeechRecognition/StreamingRecognize"
GOOGLE_STREAM = "/google.cloud.speech.v1.Speech/StreamingRecognize"

GARBAGE = b"\xff\xff\xff\xff"  # a field tag with no end: "wire format was corrupt" for any message type


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def length_delimited(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def config_with_bad_utf8() -> bytes:
    """A voxgate config request, valid but for a language_code that is not UTF-8."""
    good = pb.StreamingConfig(encoding=pb.AUDIO_ENCODING_LINEAR16, sample_rate_hz=16000).SerializeToString()
    language = pb.StreamingConfig.DESCRIPTOR.fields_by_name["language_code"].number
    config = pb.StreamingRecognizeRequest.DESCRIPTOR.fields_by_name["config"].number
    return length_delimited(config, good + length_delimited(language, b"en-\xff\xfe"))


def raw_stream(
    server: ServerProcess,
    method: str,
    deserialize: Callable[[bytes], Any],
    requests: Iterable[bytes],
    timeout: float = 30,
) -> tuple[list[Any], grpc.RpcError | None]:
    """Send `requests` as they are; the responses received and the error the call ended with (None: OK)."""
    call = server.channel().stream_stream(method, request_serializer=lambda b: b, response_deserializer=deserialize)
    got: list[Any] = []
    try:
        for response in call(iter(requests), timeout=timeout):
            got.append(response)
    except grpc.RpcError as exc:
        return got, exc
    return got, None


def raw_unary(server: ServerProcess, method: str, request: bytes, timeout: float = 30) -> grpc.RpcError | None:
    """Call a unary method with `request` as it is; the error it ended with (None: OK)."""
    call = server.channel().unary_unary(method, request_serializer=lambda b: b, response_deserializer=lambda b: b)
    try:
        call(request, timeout=timeout)
    except grpc.RpcError as exc:
        return exc
    return None
