"""Client encodings → int16 samples. Whole samples only; anything else is a precise error.

The encodings are the client package's (`voxgate_client.encodings`: their names, wire values and sample
widths; `voxgate_client.audio.decode`: the bytes → samples): `Encoding` is the same three as an enum, checked
against them at import.
"""

from __future__ import annotations

from enum import Enum
from typing import cast

import numpy as np

from voxgate_client import audio as client_audio
from voxgate_client import encodings as client_encodings
from voxgate_client.v1 import speech_pb2 as pb


class Encoding(Enum):
    LINEAR16 = "linear16"
    MULAW = "mulaw"
    ALAW = "alaw"

    @property
    def wire_name(self) -> client_encodings.Encoding:
        return cast(client_encodings.Encoding, self.value)

    @property
    def proto(self) -> pb.AudioEncoding.ValueType:
        """The AudioEncoding value of the public API."""
        return client_encodings.encoding_to_proto(self.wire_name)

    @property
    def bytes_per_sample(self) -> int:
        return client_encodings.bytes_per_sample(self.wire_name)

    @classmethod
    def from_proto(cls, value: int) -> Encoding | None:
        """None for AUDIO_ENCODING_UNSPECIFIED and values this server does not know."""
        name = client_encodings.encoding_from_proto(value)
        return None if name is None else cls(name)


if tuple(e.value for e in Encoding) != client_encodings.ENCODINGS:
    raise ImportError(
        f"service Encoding {[e.value for e in Encoding]} differs from voxgate_client's "
        f"{client_encodings.ENCODINGS}: install the voxgate-client of this checkout"
    )


class InvalidAudio(ValueError):
    pass


def decode(payload: bytes, encoding: Encoding) -> np.ndarray:
    if encoding is Encoding.LINEAR16 and len(payload) % 2:
        raise InvalidAudio(f"LINEAR16 audio must be whole 16-bit samples; got {len(payload)} bytes (odd)")
    return client_audio.decode(payload, encoding.wire_name)
