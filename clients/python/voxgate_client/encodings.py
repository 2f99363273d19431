"""Audio encoding names shared by the client API, the CLI and the server."""

from __future__ import annotations

from typing import Final, Literal, get_args

from ._proto import speech_pb2

__all__ = [
    "ENCODINGS",
    "Encoding",
    "bytes_per_sample",
    "encoding_from_proto",
    "encoding_to_proto",
    "parse_encoding",
]

Encoding = Literal["linear16", "mulaw", "alaw"]
ENCODINGS: Final[tuple[Encoding, ...]] = get_args(Encoding)

_TO_PROTO: Final[dict[Encoding, speech_pb2.AudioEncoding.ValueType]] = {
    "linear16": speech_pb2.AUDIO_ENCODING_LINEAR16,
    "mulaw": speech_pb2.AUDIO_ENCODING_MULAW,
    "alaw": speech_pb2.AUDIO_ENCODING_ALAW,
}
_FROM_PROTO: Final = {value: name for name, value in _TO_PROTO.items()}
_BYTES_PER_SAMPLE: Final[dict[Encoding, int]] = {"linear16": 2, "mulaw": 1, "alaw": 1}


def parse_encoding(name: str) -> Encoding:
    """Normalise a user-given encoding name ('LINEAR16', 'mulaw', ...)."""
    key = name.strip().lower()
    for encoding in ENCODINGS:
        if key == encoding:
            return encoding
    raise ValueError(f"unknown encoding {name!r}; expected one of {', '.join(ENCODINGS)}")


def bytes_per_sample(encoding: Encoding) -> int:
    return _BYTES_PER_SAMPLE[encoding]


def encoding_to_proto(encoding: Encoding) -> speech_pb2.AudioEncoding.ValueType:
    return _TO_PROTO[encoding]


def encoding_from_proto(value: int) -> Encoding | None:
    """The name of a proto AudioEncoding; None for UNSPECIFIED or unknown values."""
    return _FROM_PROTO.get(speech_pb2.AudioEncoding.ValueType(value))
