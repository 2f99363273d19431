"""Session limits and in-stream control: max duration, idle timeout, keep-alive, finalize."""

from __future__ import annotations

import time
from collections.abc import Iterator

from google.protobuf import duration_pb2

from tests.helpers import ServerProcess, audio_requests, config_request, finals, recognize, silence, voiced
from voxgate_client.v1 import speech_pb2 as pb


def test_max_duration_ends_gracefully_with_finals(fake_server: ServerProcess) -> None:
    limits = pb.SessionLimits(max_duration=duration_pb2.Duration(seconds=2))
    responses = recognize(fake_server.stub(), [config_request(limits=limits), *audio_requests(voiced(5.0))])
    assert responses[0].started.limits.max_duration.seconds == 2
    ended = responses[-1].ended
    assert ended.reason == pb.SESSION_END_REASON_MAX_DURATION
    assert ended.audio_duration.ToMilliseconds() == 2000  # exactly the cap: nothing past it was processed
    assert finals(responses), "the audio before the cap gets its final result"


def test_idle_timeout_ends_the_session_and_keep_alive_defers_it(fake_server: ServerProcess) -> None:
    limits = pb.SessionLimits(idle_timeout=duration_pb2.Duration(nanos=600_000_000))

    def requests(keep_alives: int) -> Iterator[pb.StreamingRecognizeRequest]:
        yield config_request(limits=limits)
        yield from audio_requests(voiced(0.5))
        for _ in range(keep_alives):
            time.sleep(0.3)
            yield pb.StreamingRecognizeRequest(keep_alive=pb.KeepAlive())
        time.sleep(5)  # silence from the client: the server must end the session on its own
        yield from audio_requests(silence(0.1))

    start = time.monotonic()
    responses = recognize(fake_server.stub(), requests(0), timeout=30)
    assert responses[-1].ended.reason == pb.SESSION_END_REASON_IDLE_TIMEOUT
    quick = time.monotonic() - start
    assert quick < 4.5

    start = time.monotonic()
    responses = recognize(fake_server.stub(), requests(5), timeout=30)
    assert responses[-1].ended.reason == pb.SESSION_END_REASON_IDLE_TIMEOUT
    assert time.monotonic() - start >= 1.5  # five keep-alives 0.3 s apart kept it open


def test_finalize_closes_the_utterance_and_the_stream_goes_on(fake_server: ServerProcess) -> None:
    requests = [
        config_request(),
        *audio_requests(voiced(1.0)),
        pb.StreamingRecognizeRequest(finalize=pb.Finalize()),
        *audio_requests(voiced(1.0)),
    ]
    responses = recognize(fake_server.stub(), requests)
    results = finals(responses)
    assert [r.utterance_index for r in results] == [0, 1]
    assert results[0].text == "alpha bravo" and results[1].text == "charlie delta"
    assert len({r.result_id for r in results}) == 2
    assert responses[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END


def test_silence_endpoint_makes_separate_utterances(fake_server: ServerProcess) -> None:
    audio = voiced(1.2) + silence(1.5) + voiced(1.2) + silence(0.3)
    responses = recognize(fake_server.stub(), [config_request(), *audio_requests(audio)])
    results = finals(responses)
    assert len(results) == 2
    events = [r.speech_event.type for r in responses if r.HasField("speech_event")]
    assert events == [pb.SPEECH_EVENT_TYPE_SPEECH_STARTED, pb.SPEECH_EVENT_TYPE_SPEECH_ENDED] * 2
    assert results[0].end_offset.ToMilliseconds() <= 1300 < results[1].start_offset.ToMilliseconds()


def test_interim_results_can_be_turned_off(fake_server: ServerProcess) -> None:
    responses = recognize(fake_server.stub(), [config_request(interim_results=False), *audio_requests(voiced(2.0))])
    results = [r.result for r in responses if r.HasField("result")]
    assert results and all(r.is_final for r in results)
