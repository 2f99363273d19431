"""LiveKit's values to voxgate's and back: audio frames as the 16-bit mono PCM voxgate takes,
in the messages the plugin sends, and voxgate's word timings as LiveKit's `TimedString`."""

from __future__ import annotations

import numpy as np
from livekit import rtc
from livekit.agents.types import TimedString

from voxgate_client import chunk_bytes
from voxgate_client.responses import duration_s
from voxgate_client.v1 import speech_pb2 as pb

CHUNK_MS = 50  # audio is sent in 50 ms messages (LiveKit frames are 10 ms)


def chunk_size(sample_rate: int) -> int:
    """Bytes of 16-bit mono PCM in one message."""
    return chunk_bytes("linear16", sample_rate, CHUNK_MS)


def mono_pcm(frame: rtc.AudioFrame) -> bytes:
    """A frame's 16-bit PCM, downmixed to mono (voxgate takes one channel per stream)."""
    if frame.num_channels == 1:
        return frame.data.tobytes()
    samples = np.frombuffer(frame.data, dtype=np.int16).reshape(-1, frame.num_channels)
    return samples.mean(axis=1).round().astype("<i2").tobytes()


def timed(word: pb.WordInfo, offset: float) -> TimedString:
    """A word, its times `offset` seconds later (the stream's start_time_offset)."""
    return TimedString(
        text=word.word,
        start_time=duration_s(word.start_offset) + offset,
        end_time=duration_s(word.end_offset) + offset,
        start_time_offset=offset,
    )
