"""Flow control end to end: fast senders are held back, slow readers cost bounded memory."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from service.limits import ENGINE_QUEUE
from tests.helpers import (
    ServerProcess,
    audio_requests,
    config_request,
    fake_script,
    recognize,
    rss_bytes,
    silence,
    start_server,
    voiced,
)
from voxgate_client.v1 import speech_pb2 as pb

CHUNK = 3200  # 100 ms at 16 kHz
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def slow_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("slow")
    # 20 ms of work per 80 ms chunk: the engine runs at 4x real time, slower than a 10x client.
    server = start_server(tmp, engine="fake", model=fake_script(tmp, step_sleep_ms=20))
    yield server
    server.stop()


def pattern(seconds: int) -> bytes:
    return (voiced(1.2) + silence(0.8)) * (seconds // 2)


def final_words(responses: list[pb.StreamingRecognizeResponse]) -> list[str]:
    return " ".join(r.result.text for r in responses if r.HasField("result") and r.result.is_final).split()


def reference_words(server: ServerProcess, audio: bytes) -> list[str]:
    """The same audio on an engine that is never behind."""
    return final_words(recognize(server.stub(), [config_request(), *audio_requests(audio, CHUNK)]))


def test_a_10x_client_is_flow_controlled_and_nothing_is_lost(
    slow_engine: ServerProcess, fake_server: ServerProcess
) -> None:
    audio = pattern(60)
    before = rss_bytes(slow_engine.proc.pid)
    peak = [before]

    def requests() -> Iterator[pb.StreamingRecognizeRequest]:
        yield config_request(flow_status=pb.FlowStatusConfig(enabled=True, interval_ms=100))
        start = time.monotonic()
        for n, i in enumerate(range(0, len(audio), CHUNK)):
            time.sleep(max(0.0, start + n * 0.01 - time.monotonic()))  # 100 ms of audio every 10 ms
            if n % 20 == 0:
                peak.append(rss_bytes(slow_engine.proc.pid))
            yield pb.StreamingRecognizeRequest(audio=audio[i : i + CHUNK])

    start = time.monotonic()
    responses = list(slow_engine.stub().StreamingRecognize(requests(), timeout=120))
    took = time.monotonic() - start
    flows = [r.flow_status for r in responses if r.HasField("flow_status")]
    # The service holds at most its queue, plus the chunk in flight and one client message, ahead of the engine.
    assert max(f.buffered_audio_ms for f in flows) <= ENGINE_QUEUE.value + 300
    assert took > 60 / 4 * 0.8, "the client could not outrun the engine: it was held back"
    words, reference = final_words(responses), reference_words(fake_server, audio)
    assert words == reference, f"the transcript is complete: {len(words)} vs {len(reference)} words; " + str(
        responses[-1]
    )
    assert responses[-1].ended.audio_duration.ToSeconds() == 60
    print(
        f"\n10x client: 60 s of audio took {took:.1f}s (engine ~4x); peak buffered "
        f"{max(f.buffered_audio_ms for f in flows)} ms; service RSS +{(max(peak) - before) / MIB:.1f} MiB"
    )
    assert max(peak) - before < 64 * MIB


def test_a_client_that_stops_reading_costs_bounded_memory(
    slow_engine: ServerProcess, fake_server: ServerProcess
) -> None:
    # The client talks in real time for 34 s and reads nothing for the first 30 s: audio and results
    # keep coming while it is not reading, and it still has 4 s to say when it starts reading again.
    audio = pattern(34)
    pause_s = 30.0
    sent = threading.Event()

    def requests() -> Iterator[pb.StreamingRecognizeRequest]:
        yield config_request(flow_status=pb.FlowStatusConfig(enabled=True, interval_ms=50))
        start = time.monotonic()
        for n, i in enumerate(range(0, len(audio), CHUNK)):
            time.sleep(max(0.0, start + n * 0.1 - time.monotonic()))  # 100 ms of audio every 100 ms
            yield pb.StreamingRecognizeRequest(audio=audio[i : i + CHUNK])
        sent.set()

    before = rss_bytes(slow_engine.proc.pid)
    call = slow_engine.stub().StreamingRecognize(requests(), timeout=180)
    peak = before
    paused_at = time.monotonic()
    while time.monotonic() - paused_at < pause_s:  # do not read while audio and results keep coming
        time.sleep(0.1)
        peak = max(peak, rss_bytes(slow_engine.proc.pid))
    reading_at = time.monotonic()
    received = [(time.monotonic(), r) for r in call]
    responses = [r for _, r in received]
    assert sent.is_set()
    live_after = [t for t, r in received if r.HasField("result") and r.result.is_final and t > reading_at + 1.0]
    print(
        f"\nslow reader: {reading_at - paused_at:.1f} s unread while talking; service RSS "
        f"+{(peak - before) / MIB:.1f} MiB; {len(responses)} responses after coalescing; "
        f"{len(live_after)} finals arrived live after reading resumed"
    )
    assert peak - before < 64 * MIB
    assert final_words(responses) == reference_words(fake_server, audio), "the session carried on"
    assert live_after, "the session carried on live once the client read again, not just its backlog"
    assert responses[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END
    assert responses[-1].ended.audio_duration.ToSeconds() == 34
    interims = [r for r in responses if r.HasField("result") and not r.result.is_final]
    for r in interims:
        assert r.result.text.endswith(r.result.delta), "coalesced interims keep their whole delta"
