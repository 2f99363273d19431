"""Multichannel audio through the public API on a real server with the embedded PocketSphinx engine:
two recordings of different speakers interleaved as one two-channel stream give, channel by channel,
what each gives sent alone as mono."""

from __future__ import annotations

import subprocess
import sys
import threading
import wave
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest

from tests.helpers import (
    ServerProcess,
    audio_requests,
    config_request,
    error_reason,
    finals,
    read_wav_pcm,
    recognize,
    requests_until,
    resume_stream,
    silence,
    start_server,
)
from voxgate_client.g711 import encode_alaw, encode_mulaw
from voxgate_client.v1 import speech_pb2 as pb
from voxgate_client.v1 import speech_pb2_grpc

LEFT, RIGHT = "go_forward.wav", "librivox_amiable_woman.wav"  # a man and a woman, different recordings
CHUNK_MS = 100
ENCODINGS: dict[str, tuple[pb.AudioEncoding.ValueType, Callable[[np.ndarray], bytes], int]] = {
    "linear16": (pb.AUDIO_ENCODING_LINEAR16, lambda s: s.astype("<i2").tobytes(), 2),
    "mulaw": (pb.AUDIO_ENCODING_MULAW, encode_mulaw, 1),
    "alaw": (pb.AUDIO_ENCODING_ALAW, encode_alaw, 1),
}


def two_voices() -> tuple[np.ndarray, np.ndarray]:
    """The two recordings as int16 at 16 kHz, the shorter padded with silence, plus a second of silence."""
    left, right = (np.frombuffer(read_wav_pcm(name)[0] + silence(1.0), dtype="<i2") for name in (LEFT, RIGHT))
    n = max(len(left), len(right))
    return (np.pad(left, (0, n - len(left))), np.pad(right, (0, n - len(right))))


def interleaved(*channels: np.ndarray) -> np.ndarray:
    return np.stack(channels, axis=1).reshape(-1)


def final_view(results: list[pb.RecognitionResult]) -> list[tuple[str, int, int, list[tuple[str, int, int]]]]:
    def ms(d: object) -> int:
        return d.seconds * 1000 + d.nanos // 1_000_000  # type: ignore[attr-defined]

    return [
        (
            r.text,
            ms(r.start_offset),
            ms(r.end_offset),
            [(w.word, ms(w.start_offset), ms(w.end_offset)) for w in r.words],
        )
        for r in results
    ]


def run(server: ServerProcess, data: bytes, chunk: int, **config: object) -> list[pb.StreamingRecognizeResponse]:
    return recognize(server.stub(), [config_request(**config), *audio_requests(data, chunk)])


@pytest.mark.parametrize("name", list(ENCODINGS))
def test_each_channel_transcribed_as_that_channel_alone(sphinx_server: ServerProcess, name: str) -> None:
    encoding, encode, width = ENCODINGS[name]
    left, right = two_voices()
    chunk = 16000 * CHUNK_MS // 1000 * width
    mono = [run(sphinx_server, encode(ch), chunk, encoding=encoding) for ch in (left, right)]
    alone = [final_view(finals(responses)) for responses in mono]
    assert all(alone), "each recording alone gives finals"
    assert alone[0] != alone[1]

    responses = run(
        sphinx_server, encode(interleaved(left, right)), 2 * chunk, encoding=encoding, audio_channel_count=2
    )
    started = responses[0].started
    assert started.effective_config.audio_channel_count == 2
    assert started.effective_config.channel_mode == pb.CHANNEL_MODE_SEPARATE
    assert responses[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END
    results = [r.result for r in responses if r.HasField("result")]
    assert {r.channel for r in results} == {1, 2}
    for channel, expected in ((1, alone[0]), (2, alone[1])):
        assert final_view([r for r in results if r.is_final and r.channel == channel]) == expected
    events = [r.speech_event for r in responses if r.HasField("speech_event")]
    assert {e.channel for e in events} == {1, 2}
    for channel in (1, 2):  # endpointing per channel: each channel's speech starts and ends on its own
        kinds = [e.type for e in events if e.channel == channel]
        assert kinds[0] == pb.SPEECH_EVENT_TYPE_SPEECH_STARTED and kinds[-1] == pb.SPEECH_EVENT_TYPE_SPEECH_ENDED
    ids = [r.result_id for r in results if r.is_final]
    assert len(set(ids)) == len(ids), "result ids are unique across channels"
    assert responses[-1].ended.audio_duration == mono[0][-1].ended.audio_duration  # one clock


def test_mono_results_carry_no_channel(sphinx_server: ServerProcess) -> None:
    left, _ = two_voices()
    responses = run(sphinx_server, left.astype("<i2").tobytes(), 3200)
    assert responses[0].started.effective_config.audio_channel_count == 1
    assert all(r.result.channel == 0 for r in responses if r.HasField("result"))
    assert all(r.speech_event.channel == 0 for r in responses if r.HasField("speech_event"))


@pytest.mark.parametrize("mode", ["downmix", "first"])
def test_downmix_and_first_channel_are_one_recognition(sphinx_server: ServerProcess, mode: str) -> None:
    left, right = two_voices()
    mono = (np.round((left.astype(np.int32) + right) / 2) if mode == "downmix" else left).astype("<i2")
    alone = final_view(finals(run(sphinx_server, mono.tobytes(), 3200)))
    channel_mode = pb.CHANNEL_MODE_DOWNMIX if mode == "downmix" else pb.CHANNEL_MODE_FIRST
    responses = run(
        sphinx_server,
        interleaved(left, right).astype("<i2").tobytes(),
        6400,
        audio_channel_count=2,
        channel_mode=channel_mode,
    )
    assert responses[0].started.effective_config.channel_mode == channel_mode
    assert all(r.result.channel == 0 for r in responses if r.HasField("result"))
    assert final_view(finals(responses)) == alone


def test_a_finalize_closes_the_utterance_on_every_channel(sphinx_server: ServerProcess) -> None:
    left, right = two_voices()
    half = len(left) // 2
    stereo = interleaved(left[:half], right[:half]).astype("<i2").tobytes()
    both_final = threading.Event()

    def requests() -> Iterator[pb.StreamingRecognizeRequest]:
        yield config_request(audio_channel_count=2, endpointing=pb.EndpointingConfig(silence_ms=10000))
        yield from audio_requests(stereo, 6400)
        yield pb.StreamingRecognizeRequest(finalize=pb.Finalize())
        both_final.wait(30)  # the stream stays open: only the finalize can bring the finals

    final_channels = []
    for response in sphinx_server.stub().StreamingRecognize(requests(), timeout=60):
        if response.HasField("result") and response.result.is_final:
            final_channels.append(response.result.channel)
            if set(final_channels) == {1, 2}:
                both_final.set()
    assert both_final.is_set()


def test_channel_count_above_eight_is_refused(sphinx_server: ServerProcess) -> None:
    with pytest.raises(grpc.RpcError) as err:
        run(sphinx_server, b"", 1, audio_channel_count=9)
    code, reason, meta = error_reason(err.value)
    assert (code, reason, meta.get("field")) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "UNSUPPORTED_AUDIO_FORMAT",
        "config.audio_channel_count",
    )
    assert sphinx_server.stub().GetCapabilities(pb.GetCapabilitiesRequest()).max_audio_channel_count == 8


@pytest.mark.parametrize(
    ("encoding", "channels", "size"),
    [
        (pb.AUDIO_ENCODING_LINEAR16, 2, 6),  # three samples: one frame and a half
        (pb.AUDIO_ENCODING_MULAW, 3, 4),
    ],
)
def test_audio_not_in_whole_frames_is_invalid_audio(
    sphinx_server: ServerProcess, encoding: int, channels: int, size: int
) -> None:
    responses: list[pb.StreamingRecognizeResponse] = []
    with pytest.raises(grpc.RpcError) as err:
        for response in sphinx_server.stub().StreamingRecognize(
            iter(
                [
                    config_request(encoding=encoding, audio_channel_count=channels),
                    pb.StreamingRecognizeRequest(audio=b"\x01" * size),
                ]
            ),
            timeout=60,
        ):
            responses.append(response)
    code, reason, meta = error_reason(err.value)
    assert (code, reason, meta.get("field")) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_AUDIO", "audio")
    assert "whole frames" in err.value.details()
    assert responses[-1].ended.reason == pb.SESSION_END_REASON_ERROR  # the same ending as a mono session's


class Held:
    """A session held open until release()."""

    def __init__(self, server: ServerProcess, channels: int, mode: int = pb.CHANNEL_MODE_UNSPECIFIED) -> None:
        self._release = threading.Event()
        self._channel = grpc.insecure_channel(server.target)

        def requests() -> Iterator[pb.StreamingRecognizeRequest]:
            yield config_request(audio_channel_count=channels, channel_mode=mode)
            self._release.wait(60)

        self.call = speech_pb2_grpc.SpeechStub(self._channel).StreamingRecognize(requests(), timeout=60)
        self.first = next(self.call)

    def release(self) -> None:
        self._release.set()
        list(self.call)
        self._channel.close()


@pytest.fixture(scope="module")
def two_slot_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_server(Path(tmp_path_factory.mktemp("two-slots")), "--max-sessions", "2", engine="sphinx")
    yield server
    server.stop()


def capacity_error(server: ServerProcess, channels: int, says: str = "") -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as err:
        Held(server, channels)
    code, reason, _ = error_reason(err.value)
    assert says in (err.value.details() or ""), err.value.details()
    return code, reason


def test_every_channel_is_admitted_or_none(two_slot_server: ServerProcess) -> None:
    stub = two_slot_server.stub()
    mono = Held(two_slot_server, 1)
    try:  # one slot left: a two-channel session would need two, and gets none
        refused = capacity_error(two_slot_server, 2, "2 sessions asked for (one per channel) but 1 of 2 are free")
        assert refused == (grpc.StatusCode.UNAVAILABLE, "CAPACITY")
        assert stub.GetCapabilities(pb.GetCapabilitiesRequest()).active_sessions == 1
    finally:
        mono.release()
    stereo = Held(two_slot_server, 2)
    try:  # it holds both slots
        assert stub.GetCapabilities(pb.GetCapabilitiesRequest()).active_sessions == 2
        assert capacity_error(two_slot_server, 1, "all 2 sessions are in use") == (
            grpc.StatusCode.UNAVAILABLE,
            "CAPACITY",
        )
    finally:
        stereo.release()
    three = capacity_error(two_slot_server, 3, "3 sessions asked for (one per channel) but 2 of 2 are free")
    assert three == (grpc.StatusCode.UNAVAILABLE, "CAPACITY")
    downmix = Held(two_slot_server, 2, pb.CHANNEL_MODE_DOWNMIX)  # the slots are free again; a downmix takes one
    try:
        assert stub.GetCapabilities(pb.GetCapabilitiesRequest()).active_sessions == 1
    finally:
        downmix.release()


def write_wav(path: Path, frames: np.ndarray) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(frames.shape[1] if frames.ndim == 2 else 1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(frames.astype("<i2").tobytes())
    return path


def transcribe(server: ServerProcess, path: Path, *flags: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "service", "transcribe", "--server", server.target, "--no-pace", *flags, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return out.splitlines()


def test_transcribe_cli_prints_each_channel(sphinx_server: ServerProcess, tmp_path: Path) -> None:
    left, right = two_voices()
    alone = [transcribe(sphinx_server, write_wav(tmp_path / f"{n}.wav", ch)) for n, ch in (("l", left), ("r", right))]
    stereo = write_wav(tmp_path / "stereo.wav", np.stack([left, right], axis=1))
    lines = transcribe(sphinx_server, stereo, "--channels", "separate")
    for tag, expected in (("[ch1] ", alone[0]), ("[ch2] ", alone[1])):
        assert [line.removeprefix(tag) for line in lines if line.startswith(tag)] == expected
    assert len(lines) == len(alone[0]) + len(alone[1])

    mixed = np.round((left.astype(np.int32) + right) / 2)
    assert transcribe(sphinx_server, stereo, "--channels", "mix") == transcribe(
        sphinx_server, write_wav(tmp_path / "mix.wav", mixed)
    )


def test_a_multichannel_session_resumes_without_loss_or_duplicates(sphinx_server: ServerProcess) -> None:
    left, right = two_voices()
    stereo = interleaved(left, right).astype("<i2").tobytes()
    chunk = 6400  # 100 ms of two 16 kHz LINEAR16 channels
    flow = {"audio_channel_count": 2, "flow_status": pb.FlowStatusConfig(enabled=True, interval_ms=100)}
    reference = finals(run(sphinx_server, stereo, chunk, **flow))
    stop_sending = threading.Event()

    first: list[pb.StreamingRecognizeResponse] = []
    call = sphinx_server.stub().StreamingRecognize(
        requests_until(stop_sending, config_request(**flow), stereo, chunk), timeout=60
    )
    for response in call:  # vanish once half the audio is acknowledged, without half-closing
        first.append(response)
        if response.HasField("flow_status") and response.flow_status.acked_audio_bytes >= len(stereo) // 2:
            break
    stop_sending.set()
    call.cancel()
    acked = max(r.flow_status.acked_audio_bytes for r in first if r.HasField("flow_status"))
    assert acked % 4 == 0, "acknowledged in whole frames"

    resume = pb.StreamingRecognizeRequest(
        config=pb.StreamingConfig(
            resume_token=first[0].started.resume_token, resume_last_seq=first[-1].seq, resume_audio_bytes=acked
        )
    )
    second = resume_stream(sphinx_server.stub(), [resume, *audio_requests(stereo[acked:], chunk)])
    assert second[0].started.resumed and second[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END
    got = finals(first) + finals(second[1:])
    assert len({r.result_id for r in got}) == len(got), "no final result twice"
    for channel in (1, 2):
        assert final_view([r for r in got if r.channel == channel]) == final_view(
            [r for r in reference if r.channel == channel]
        )
