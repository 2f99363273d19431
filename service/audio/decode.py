"""Client encodings → int16 samples. Whole samples only; anything else is a precise error."""

from __future__ import annotations

from enum import Enum

import numpy as np

from voxgate_client.g711 import decode_alaw, decode_mulaw


class Encoding(Enum):
    LINEAR16 = "linear16"
    MULAW = "mulaw"
    ALAW = "alaw"


class InvalidAudio(ValueError):
    pass


def decode(payload: bytes, encoding: Encoding) -> np.ndarray:
    if encoding is Encoding.LINEAR16:
        if len(payload) % 2:
            raise InvalidAudio(f"LINEAR16 audio must be whole 16-bit samples; got {len(payload)} bytes (odd)")
        return np.frombuffer(payload, dtype="<i2").astype(np.int16)
    if encoding is Encoding.MULAW:
        return decode_mulaw(payload)
    return decode_alaw(payload)
