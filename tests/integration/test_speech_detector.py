"""`voxgate serve --speech-detector silero` on Whisper, from the wire: hold music gives no words, and a voice
over music gets its final when the voice stops, not when the music does."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from bench.nonspeech_audio import at_level, synthesize, to_pcm16
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
