"""Multichannel audio through the Riva and Google endpoints, driven by the unmodified vendor clients
(nvidia-riva-client, google-cloud-speech): with separate recognition per channel each channel's
finals, tagged with its 1-based channel_tag, are what that channel gives alone as mono; without
it, as both vendors document, only the first channel is recognized."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import numpy as np
import pytest
import riva.client
from google.cloud import speech_v1 as speech
from google.cloud.speech_v1.services.speech.transports import SpeechGrpcTransport

from tests.helpers import ServerProcess, read_wav_pcm, silence

CHUNK = 3200  # 100 ms of one 16 kHz LINEAR16 channel
Finals = Callable[..., dict[int, list[str]]]  # (server, audio, channels, separate[, chunk bytes]) → finals by tag


def two_voices() -> tuple[bytes, bytes, bytes]:
    """Two recordings of different speakers (padded to one length) as mono PCM, and interleaved."""
    left, right = (
        np.frombuffer(read_wav_pcm(name)[0] + silence(1.0), dtype="<i2")
        for name in ("go_forward.wav", "librivox_amiable_woman.wav")
    )
    n = max(len(left), len(right))
    left, right = np.pad(left, (0, n - len(left))), np.pad(right, (0, n - len(right)))
    return left.tobytes(), right.tobytes(), np.stack([left, right], axis=1).astype("<i2").tobytes()


def chunks(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def finals_by_channel(results: list[tuple[int, str]]) -> dict[int, list[str]]:
    by: dict[int, list[str]] = {}
    for tag, text in results:
        by.setdefault(tag, []).append(text)
    return by


def riva_finals(
    server: ServerProcess, audio: bytes, channels: int, separate: bool, chunk: int = 0
) -> dict[int, list[str]]:
    config = riva.client.StreamingRecognitionConfig(
        config=riva.client.RecognitionConfig(
            encoding=riva.client.AudioEncoding.LINEAR_PCM,
            sample_rate_hertz=16000,
            language_code="en-US",
            max_alternatives=1,
            audio_channel_count=channels,
            enable_separate_recognition_per_channel=separate,
        ),
        interim_results=True,
    )
    asr = riva.client.ASRService(riva.client.Auth(uri=server.target))
    pieces = chunks(audio, chunk or CHUNK * channels)
    responses = asr.streaming_response_generator(audio_chunks=pieces, streaming_config=config)
    return finals_by_channel(
        [
            (r.channel_tag, r.alternatives[0].transcript)
            for response in responses
            for r in response.results
            if r.is_final
        ]
    )


def google_finals(
    server: ServerProcess, audio: bytes, channels: int, separate: bool, chunk: int = 0
) -> dict[int, list[str]]:
    config = speech.StreamingRecognitionConfig(
        config=speech.RecognitionConfig(
            encoding=speech.RecognitionConfig.AudioEncoding.LINEAR16,
            sample_rate_hertz=16000,
            language_code="en-US",
            audio_channel_count=channels,
            enable_separate_recognition_per_channel=separate,
        ),
        interim_results=True,
    )
    client = speech.SpeechClient(transport=SpeechGrpcTransport(channel=grpc.insecure_channel(server.target)))
    requests = (speech.StreamingRecognizeRequest(audio_content=c) for c in chunks(audio, chunk or CHUNK * channels))
    responses = client.streaming_recognize(config, requests, retry=None, timeout=120)
    return finals_by_channel(
        [
            (r.channel_tag, r.alternatives[0].transcript)
            for response in responses
            for r in response.results
            if r.is_final
        ]
    )


def google_recognize(server: ServerProcess, audio: bytes, channels: int) -> dict[int, list[str]]:
    client = speech.SpeechClient(transport=SpeechGrpcTransport(channel=grpc.insecure_channel(server.target)))
    response = client.recognize(
        config=speech.RecognitionConfig(
            encoding=speech.RecognitionConfig.AudioEncoding.LINEAR16,
            sample_rate_hertz=16000,
            language_code="en-US",
            audio_channel_count=channels,
            enable_separate_recognition_per_channel=channels > 1,
        ),
        audio=speech.RecognitionAudio(content=audio),
        retry=None,
        timeout=120,
    )
    return finals_by_channel([(r.channel_tag, r.alternatives[0].transcript) for r in response.results])


@pytest.mark.parametrize("finals_of", [riva_finals, google_finals], ids=["riva", "google"])
def test_separate_recognition_per_channel(sphinx_server: ServerProcess, finals_of: Finals) -> None:
    left, right, stereo = two_voices()
    alone = [finals_of(sphinx_server, mono, 1, False)[0] for mono in (left, right)]  # mono: channel_tag 0
    assert alone[0] and alone[1] and alone[0] != alone[1]
    assert finals_of(sphinx_server, stereo, 2, True) == {1: alone[0], 2: alone[1]}


@pytest.mark.parametrize("finals_of", [riva_finals, google_finals], ids=["riva", "google"])
def test_chunks_that_split_frames_are_joined_across_messages(sphinx_server: ServerProcess, finals_of: Finals) -> None:
    """Vendor clients read files in fixed chunks: 4096 bytes of 3 channels (6-byte frames) or 6402 of 2 (4-byte
    frames) end inside a frame. The rest of that frame comes in the next message."""
    left, right, stereo = two_voices()
    whole = finals_of(sphinx_server, stereo, 2, True)
    assert whole[1] and whole[2]
    assert finals_of(sphinx_server, stereo, 2, True, 6402) == whole
    quiet = np.zeros(len(left) // 2, dtype="<i2")
    three = np.stack([np.frombuffer(left, "<i2"), np.frombuffer(right, "<i2"), quiet], axis=1).astype("<i2")
    assert finals_of(sphinx_server, three.tobytes(), 3, True, 4096) == whole  # the silent third: no finals


@pytest.mark.parametrize("finals_of", [riva_finals, google_finals], ids=["riva", "google"])
def test_without_separate_recognition_only_the_first_channel_is_recognized(
    sphinx_server: ServerProcess, finals_of: Finals
) -> None:
    left, _, stereo = two_voices()
    assert finals_of(sphinx_server, stereo, 2, False) == finals_of(sphinx_server, left, 1, False)


def test_google_recognize_tags_each_channel(sphinx_server: ServerProcess) -> None:
    left, right, stereo = two_voices()
    alone = [google_recognize(sphinx_server, mono, 1)[0] for mono in (left, right)]
    assert google_recognize(sphinx_server, stereo, 2) == {1: alone[0], 2: alone[1]}
