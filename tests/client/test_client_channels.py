"""Multichannel in the Python client: the config it sends and the WAV channels it reads."""

from __future__ import annotations

import io
import wave

import numpy as np
import pytest

from voxgate_client import StreamConfig, read_wav, read_wav_channels
from voxgate_client.v1 import speech_pb2 as pb


def test_a_multichannel_config_names_its_channels_and_mode() -> None:
    mono = StreamConfig("linear16", 16000)
    assert (mono.to_proto().audio_channel_count, mono.to_proto().channel_mode) == (1, pb.CHANNEL_MODE_UNSPECIFIED)
    stereo = StreamConfig("mulaw", 8000, channels=2)
    assert (stereo.to_proto().audio_channel_count, stereo.to_proto().channel_mode) == (2, pb.CHANNEL_MODE_SEPARATE)
    assert stereo.bytes_per_second == 16000 and stereo.frame_bytes == 2  # pacing counts every channel
    assert (
        StreamConfig("linear16", 16000, channels=3, channel_mode="downmix").to_proto().channel_mode
        == pb.CHANNEL_MODE_DOWNMIX
    )
    with pytest.raises(ValueError, match="channels"):
        StreamConfig("linear16", 16000, channels=9)
    with pytest.raises(ValueError, match="channel_mode"):
        StreamConfig("linear16", 16000, channels=2, channel_mode="left")


def test_read_wav_channels_keeps_them_and_read_wav_mixes_them() -> None:
    frames = np.array([[100, -100], [2000, 4000], [-3, 5]], dtype="<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(frames.tobytes())
    samples, rate = read_wav_channels(buf.getvalue())
    assert rate == 8000 and samples.tolist() == frames.tolist()
    assert read_wav(buf.getvalue()).samples.tolist() == [0, 3000, 1]
