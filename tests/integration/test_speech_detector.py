"""`voxgate serve --speech-detector silero` on Whisper, from the wire: hold music gives no words, and a voice
over music gets its final when the voice stops, not when the music does. And on either detector, a client
that asks (StreamingConfig.non_speech_events) hears of the music and the DTMF digits, on their channel."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from bench.nonspeech_audio import at_level, dtmf_tone, synthesize, to_pcm16
from tests.helpers import (
    ROOT,
    ServerProcess,
    audio_requests,
    config_request,
    final_text,
    finals,
    read_wav_pcm,
    recognize,
    seconds,
    start_server,
    word_error_rate,
)
from voxgate_client.v1 import speech_pb2 as pb


@pytest.fixture(scope="module")
def gated_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_server(tmp_path_factory.mktemp("gated"), "--speech-detector", "silero", engine="whisper")
    yield server
    server.stop()


def speech_events(responses: list[pb.StreamingRecognizeResponse]) -> list[tuple[int, float]]:
    return [(r.speech_event.type, seconds(r.speech_event.offset)) for r in responses if r.HasField("speech_event")]


@pytest.mark.parametrize("kind", ["pad", "arpeggio"])
def test_hold_music_gives_no_words_and_no_utterance(gated_server: ServerProcess, kind: str) -> None:
    music = to_pcm16(synthesize(kind, 30.0, seed=5))
    responses = recognize(gated_server.stub(), [config_request(), *audio_requests(music, 3200)])
    assert [r.result.text for r in responses if r.HasField("result")] == []
    assert speech_events(responses) == []
    assert responses[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END


def test_a_voice_over_music_ends_when_the_voice_does(gated_server: ServerProcess) -> None:
    pcm = read_wav_pcm("flite_rms_call_me_back.wav")[0]
    voice = np.frombuffer(pcm, dtype="<i2") / 32768
    mixed = np.concatenate([voice, np.zeros(16000 * 15)])  # the music goes on 15 s after the last word
    level = 20 * np.log10(np.sqrt(np.mean(voice**2))) - 5  # 5 dB below the voice
    mixed += at_level(synthesize("pad", len(mixed) / 16000, seed=6), level)[: len(mixed)]
    responses = recognize(gated_server.stub(), [config_request(), *audio_requests(to_pcm16(mixed), 3200)])
    ended = [offset for kind, offset in speech_events(responses) if kind == pb.SPEECH_EVENT_TYPE_SPEECH_ENDED]
    assert len(finals(responses)) == 1 and len(ended) == 1
    assert ended[0] <= len(voice) / 16000 + 1.0, "the end of speech is the voice's, with the music going on"
    assert word_error_rate("please call me back tomorrow morning", final_text(responses)) == 0


def test_a_wrong_detector_name_is_refused_with_the_choices(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "service", "serve", "--port", "0", "--speech-detector", "neural"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 2
    assert "invalid choice: 'neural' (choose from 'webrtcvad', 'silero')" in done.stderr


@pytest.fixture(scope="module")
def default_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_server(tmp_path_factory.mktemp("default"), engine="whisper")
    yield server
    server.stop()


def ivr_call() -> tuple[np.ndarray, np.ndarray]:
    """Two channels of 16 s: the caller's (a sentence, then keys 4 and 2 at 12 s) and the IVR's (hold music
    from 1 s to 9 s, then a sentence at 11 s)."""
    voice = np.frombuffer(read_wav_pcm("flite_rms_call_me_back.wav")[0], dtype="<i2") / 32768
    n = 16000 * 16
    caller, ivr = np.zeros(n), np.zeros(n)
    caller[8000 : 8000 + len(voice)] = voice
    for k, key in enumerate("42"):
        at = 16000 * 12 + 3200 * k
        caller[at : at + 1600] = at_level(dtmf_tone(key, 0.1), -20)
    ivr[16000 : 16000 * 9] = synthesize("arpeggio", 8.0, seed=33, dbfs=-20)
    ivr[16000 * 11 : 16000 * 11 + len(voice)] = voice
    return caller, ivr


@pytest.mark.parametrize("server_kind", ["default", "gated"])
def test_music_and_digits_are_reported_on_their_channel_when_asked(
    server_kind: str, default_server: ServerProcess, gated_server: ServerProcess
) -> None:
    server = default_server if server_kind == "default" else gated_server
    caller, ivr = ivr_call()
    stereo = to_pcm16(np.stack([caller, ivr], axis=1).reshape(-1))
    config = config_request(audio_channel_count=2, channel_mode=pb.CHANNEL_MODE_SEPARATE, non_speech_events=True)
    responses = recognize(server.stub(), [config, *audio_requests(stereo, 6400)])
    other = (pb.SPEECH_EVENT_TYPE_SPEECH_STARTED, pb.SPEECH_EVENT_TYPE_SPEECH_ENDED)
    events = [r.speech_event for r in responses if r.HasField("speech_event") and r.speech_event.type not in other]
    said = [(e.channel, pb.SpeechEventType.Name(e.type).removeprefix("SPEECH_EVENT_TYPE_"), e.digit) for e in events]
    assert sorted(said) == [(1, "DTMF", "2"), (1, "DTMF", "4"), (2, "MUSIC_ENDED", ""), (2, "MUSIC_STARTED", "")]
    offsets = {(e.channel, e.type, e.digit): seconds(e.offset) for e in events}
    assert offsets[(1, pb.SPEECH_EVENT_TYPE_DTMF, "4")] == pytest.approx(12.0, abs=0.03)
    assert offsets[(1, pb.SPEECH_EVENT_TYPE_DTMF, "2")] == pytest.approx(12.2, abs=0.03)
    assert 0.95 <= offsets[(2, pb.SPEECH_EVENT_TYPE_MUSIC_STARTED, "")] <= 2.5
    assert 9.0 - 0.032 <= offsets[(2, pb.SPEECH_EVENT_TYPE_MUSIC_ENDED, "")] <= 9.3  # 32 ms windows
    texts = {c: " ".join(r.text for r in finals(responses) if r.channel == c) for c in (1, 2)}
    for channel in (1, 2):
        assert word_error_rate("please call me back tomorrow morning", texts[channel]) <= 0.2, texts


def test_no_music_or_digit_event_unless_asked(default_server: ServerProcess) -> None:
    caller, _ = ivr_call()
    hold = synthesize("pad", 4.0, seed=34, dbfs=-20)
    responses = recognize(
        default_server.stub(), [config_request(), *audio_requests(to_pcm16(np.concatenate([caller, hold])))]
    )
    kinds = {r.speech_event.type for r in responses if r.HasField("speech_event")}
    assert kinds <= {pb.SPEECH_EVENT_TYPE_SPEECH_STARTED, pb.SPEECH_EVENT_TYPE_SPEECH_ENDED}
    started = next(r.started for r in responses if r.HasField("started"))
    assert not started.effective_config.non_speech_events
