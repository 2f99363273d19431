"""Interleaved multichannel audio → the mono streams a session recognizes.

A frame is one sample of every channel; a message must hold whole frames. Separate
recognition and first-channel selection pick samples out in the wire encoding (no
transcoding, so each channel's bytes are exactly what that channel sent alone as mono);
downmixing decodes, averages and hands on LINEAR16.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from voxgate_client import audio as client_audio

from ..session_config import ChannelMode
from .decode import Encoding, InvalidAudio


@dataclass(frozen=True)
class ChannelSplit:
    encoding: Encoding
    channels: int
    mode: ChannelMode

    @property
    def outputs(self) -> int:
        return self.channels if self.mode is ChannelMode.SEPARATE else 1

    @property
    def output_encoding(self) -> Encoding:
        """What each output stream is encoded as."""
        return Encoding.LINEAR16 if self.mode is ChannelMode.DOWNMIX else self.encoding

    @property
    def frame_bytes(self) -> int:
        return self.encoding.bytes_per_sample * self.channels

    def to_output_bytes(self, client_bytes: int) -> int:
        """Bytes of one output stream for `client_bytes` of interleaved audio (whole frames)."""
        return client_bytes // self.frame_bytes * self.output_encoding.bytes_per_sample

    def to_client_bytes(self, output_bytes: int) -> int:
        return output_bytes // self.output_encoding.bytes_per_sample * self.frame_bytes

    def split(self, data: bytes) -> list[bytes]:
        """One byte string per output stream, all of the same number of samples."""
        if len(data) % self.frame_bytes:
            raise InvalidAudio(
                f"audio of {self.channels} interleaved {self.encoding.name} channels must be whole frames of "
                f"{self.frame_bytes} bytes; got {len(data)} bytes"
            )
        if self.mode is ChannelMode.DOWNMIX:
            pcm = client_audio.decode(data, self.encoding.wire_name).reshape(-1, self.channels).astype(np.int32)
            mean = np.round(pcm.sum(axis=1) / self.channels).astype("<i2")
            return [mean.tobytes()]
        dtype = "<i2" if self.encoding.bytes_per_sample == 2 else "u1"
        frames = np.frombuffer(data, dtype=dtype).reshape(-1, self.channels)
        picked = range(self.channels) if self.mode is ChannelMode.SEPARATE else range(1)
        return [frames[:, k].tobytes() for k in picked]
