"""A pause is not a freeze: an engine that holds its last words until more audio comes is not frozen.

Real speech through the public API on the embedded PocketSphinx engine (which
holds back words until it has heard SETTLE_MS more audio). A client that pauses
with keep_alives, or goes quiet, longer than --freeze-timeout-s must get the same
single utterance as a client that never paused; an engine that really stops
consuming audio must still be reset (see also test_chaos.py).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import duration_pb2

from tests.helpers import ServerProcess, config_request, fake_script, read_wav_pcm, start_server, voiced
from tests.reliability.streams import CHUNK, Recorded, live, record
from voxgate_client.v1 import speech_pb2 as pb

FREEZE_S = 2.0
SPEECH = "librivox_amiable_woman.wav"
SPLIT_AT = 2 * 32000  # 2 s into the clip, mid-utterance ("had he married a more | amiable ...")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path_factory.mktemp("pause"), "--freeze-timeout-s", str(FREEZE_S))
    yield proc
    proc.stop()


def audio(data: bytes) -> Iterator[pb.StreamingRecognizeRequest]:
    for i in range(0, len(data), CHUNK):
        yield pb.StreamingRecognizeRequest(audio=data[i : i + CHUNK])


def keep_alives(seconds: float, every_s: float = 0.5) -> Iterator[pb.StreamingRecognizeRequest]:
    for _ in range(round(seconds / every_s)):
        time.sleep(every_s)
        yield pb.StreamingRecognizeRequest(keep_alive=pb.KeepAlive())


def quiet(seconds: float) -> Iterator[pb.StreamingRecognizeRequest]:
    """The client stays connected and sends nothing (a half-open client)."""
    time.sleep(seconds)
    yield from ()


def run(server: ServerProcess, requests: Iterator[pb.StreamingRecognizeRequest], **config: object) -> Recorded:
    rec = Recorded()
    record(server, itertools.chain([config_request(**config)], requests), rec)
    assert rec.error is None, rec.error
    return rec


def texts(rec: Recorded) -> list[str]:
    return [r.text for _, r in rec.finals()]


def warning_codes(rec: Recorded) -> list[str]:
    return [w.code for _, w in rec.warnings()]


def test_a_keep_alive_pause_longer_than_the_freeze_timeout_keeps_the_utterance_whole(server: ServerProcess) -> None:
    pcm, _ = read_wav_pcm(SPEECH)
    unpaused = run(server, audio(pcm))
    paused = run(server, itertools.chain(audio(pcm[:SPLIT_AT]), keep_alives(FREEZE_S + 2.5), audio(pcm[SPLIT_AT:])))
    assert "ENGINE_RESET" not in warning_codes(paused), warning_codes(paused)
    assert len(texts(unpaused)) == 1 and texts(paused) == texts(unpaused)
    ended = paused.ended()
    assert ended is not None and ended.reason == pb.SESSION_END_REASON_CLIENT_END


def test_a_client_that_goes_quiet_after_speech_gets_its_utterance_whole(server: ServerProcess) -> None:
    # Half-open: speech, then nothing at all (no keep_alive, no half-close) until the idle timeout.
    pcm, _ = read_wav_pcm(SPEECH)
    idle = pb.SessionLimits(idle_timeout=duration_pb2.Duration(seconds=round(FREEZE_S) + 3))
    closed_at_once = run(server, audio(pcm[:SPLIT_AT]))
    gone_quiet = run(server, itertools.chain(audio(pcm[:SPLIT_AT]), quiet(FREEZE_S + 4)), limits=idle)
    assert "ENGINE_RESET" not in warning_codes(gone_quiet), warning_codes(gone_quiet)
    assert len(texts(closed_at_once)) == 1 and texts(gone_quiet) == texts(closed_at_once)
    ended = gone_quiet.ended()
    assert ended is not None and ended.reason == pb.SESSION_END_REASON_IDLE_TIMEOUT


def test_an_engine_that_stops_consuming_audio_is_still_reset(tmp_path: Path) -> None:
    # The fake engine stops consuming 1 s into each engine session while the client keeps sending.
    script = fake_script(tmp_path, stall_at_ms=1000)
    server = start_server(tmp_path, "--freeze-timeout-s", "1", engine="fake", model=script)
    try:
        rec = run(server, live(voiced(4.0), speed=2.0))
        assert "ENGINE_RESET" in warning_codes(rec)
        ended = rec.ended()
        assert ended is not None and ended.reason == pb.SESSION_END_REASON_CLIENT_END
    finally:
        server.stop()
