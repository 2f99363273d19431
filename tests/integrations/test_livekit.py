"""The LiveKit Agents plugin (clients/livekit-plugins-voxgate) against a real voxgate server on the
embedded engine, driven the way livekit-agents drives an STT (tests/integrations/drive.py)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ServerProcess, read_wav_pcm, start_server, word_error_rate
from tests.integrations.drive import (
    RATE,
    TRUTH,
    LiveKitRun,
    frames,
    livekit_stream,
    one_utterance,
    reference_finals,
    resample,
    seconds_of,
    two_utterances,
)
from tests.integrations.fixtures import require_livekit
from tests.relay import Relay
from voxgate_client import Phrase, ResumePolicy

require_livekit()

from livekit.agents import APIConnectionError, APIConnectOptions, APIStatusError  # noqa: E402
from livekit.plugins import voxgate  # noqa: E402

FAST_RESUME = ResumePolicy(backoff_s=0.05, flow_status_interval_ms=100)
UTTERANCE = ["start_of_speech", "interim_transcript", "final_transcript", "end_of_speech"]


def check_transcripts(run: LiveKitRun, reference: list[str], audio_s: float) -> None:
    """Finals as voxgate's own client gets them, near the truth; interims that grow into them; word
    timings in order, inside their result and the audio; the server's language on every result."""
    finals = run.of("final_transcript")
    assert [f.alternatives[0].text for f in finals] == reference
    for final, truth in zip(finals, TRUTH.values(), strict=False):
        assert word_error_rate(truth, final.alternatives[0].text) <= 0.25
    interims = run.of("interim_transcript")
    assert len(interims) >= 2 * len(finals)
    for before, after in zip(interims, interims[1:], strict=False):
        b, a = before.alternatives[0], after.alternatives[0]
        if b.metadata["result_id"] == a.metadata["result_id"]:
            assert a.text.startswith(b.text), "interims of an utterance only append"
    for event in [*interims, *finals]:
        data = event.alternatives[0]
        assert data.language == "en-US", "the language the server applied"
        assert data.words, "word timings"
        assert " ".join(data.words) == data.text
        offset = data.words[0].start_time_offset
        previous_end = 0.0
        for w in data.words:
            assert data.start_time - 1e-6 <= w.start_time <= w.end_time <= data.end_time + 1e-6
            assert previous_end - 1e-6 <= w.start_time, "words in order"
            assert w.start_time - offset >= 0 and w.end_time - offset <= audio_s
            previous_end = w.end_time
    assert len({f.request_id for f in finals}) == 1 and finals[0].request_id, "the session id"


async def test_stream_of_a_room_track_gives_speech_events_interims_finals_words_and_language(
    sphinx_server: ServerProcess,
) -> None:
    pcm = two_utterances()
    reference = await reference_finals(sphinx_server.target, pcm)
    stt = voxgate.STT(address=sphinx_server.target)
    try:
        # 10 ms frames at 48 kHz in real time, as a room delivers them; LiveKit resamples to 16 kHz.
        run = await livekit_stream(stt, resample(pcm, 48000), rate=48000, frame_ms=10, pace=1.0)
    finally:
        await stt.aclose()
    assert run.sequence == UTTERANCE * 2, run.describe()
    check_transcripts(run, reference, seconds_of(pcm))
    starts, ends = run.of("start_of_speech"), run.of("end_of_speech")
    finals = run.of("final_transcript")
    for start, final, end in zip(starts, finals, ends, strict=True):
        # Wall-clock onsets and ends: the server's offsets on the stream's clock.
        assert start.speech_start_time < end.speech_end_time
        data = final.alternatives[0]
        assert abs((end.speech_end_time - start.speech_start_time) - (data.end_time - data.start_time)) < 0.6
    # Speech starts ~0.5 s into the audio: the onset's wall clock is that long after the first frame.
    assert 0.2 < starts[0].speech_start_time - run.started_wall < 1.5
    usage = sum(e.recognition_usage.audio_duration for e in run.of("recognition_usage"))
    assert abs(usage - seconds_of(pcm)) < 0.1, "every second sent is reported once"
    assert stt.model == "sphinx" and stt.provider == "voxgate"


async def test_audio_sent_all_at_once_keeps_each_utterance_between_its_speech_events(
    sphinx_server: ServerProcess,
) -> None:
    # Unpaced, voxgate's speech detection runs ahead of the engine: the second utterance's
    # SPEECH_STARTED (and the first's SPEECH_ENDED) come before the first one's text and final.
    pcm = two_utterances()
    reference = await reference_finals(sphinx_server.target, pcm)
    stt = voxgate.STT(address=sphinx_server.target)
    try:
        run = await livekit_stream(stt, pcm, frame_ms=20, pace=0)
    finally:
        await stt.aclose()
    assert run.sequence == UTTERANCE * 2, run.describe()
    assert [f.alternatives[0].text for f in run.of("final_transcript")] == reference


async def test_keyterms_replaced_mid_call_apply_from_the_next_utterance(fake_server: ServerProcess) -> None:
    # The fake engine's words are the hinted phrases' words: which key terms an utterance was heard with shows.
    gap_s = seconds_of(read_wav_pcm("go_forward.wav")[0]) + 0.75  # between the two utterances
    stt = voxgate.STT(address=fake_server.target, keyterms=["Ozempic"])

    def replace(_: Any) -> None:
        stt.update_options(keyterms=[Phrase("Siobhan Kowalczyk", 15)])

    try:
        # Unpaced: the update goes into the stream's input after the frames before it, whatever the timing.
        run = await livekit_stream(stt, two_utterances(), frame_ms=20, pace=0, actions=[(gap_s, replace)])
    finally:
        await stt.aclose()
    finals = [set(f.alternatives[0].text.split()) for f in run.of("final_transcript")]
    assert len(finals) == 2 and finals[0] == {"Ozempic"}, finals
    assert finals[1] and finals[1] <= {"Siobhan", "Kowalczyk"}, finals


async def test_recognize_gives_one_final_with_words(sphinx_server: ServerProcess) -> None:
    pcm = two_utterances()
    reference = await reference_finals(sphinx_server.target, pcm)
    stt = voxgate.STT(address=sphinx_server.target)
    try:
        event = await stt.recognize(frames(pcm, RATE, 20))
    finally:
        await stt.aclose()
    assert event.type.value == "final_transcript" and event.request_id
    data = event.alternatives[0]
    assert data.text == " ".join(reference)
    assert data.language == "en-US"
    assert [str(w) for w in data.words] == data.text.split()
    assert all(0 <= w.start_time <= w.end_time <= seconds_of(pcm) for w in data.words)
    assert data.start_time == data.words[0].start_time and data.end_time == data.words[-1].end_time


async def test_flush_finalizes_the_utterance_without_waiting_for_the_endpoint(sphinx_server: ServerProcess) -> None:
    # A 5 s endpoint: only the flush (LiveKit's end of turn) can close the utterance while audio goes on.
    stt = voxgate.STT(address=sphinx_server.target, endpointing_silence_ms=5000)
    pcm = one_utterance() + bytes(2 * RATE * 2)
    try:
        run = await livekit_stream(stt, pcm, frame_ms=20, pace=1.0, flush_at_s=2.6)
    finally:
        await stt.aclose()
    finals = run.of("final_transcript")
    assert len(finals) == 1
    final_at = next(t.at for t in run.events if t.event.type.value == "final_transcript")
    assert final_at < run.input_ended_at - 1.0, "final well before the input ended"
    assert word_error_rate(TRUTH["go_forward.wav"], finals[0].alternatives[0].text) <= 0.25


async def test_streams_and_recognitions_share_one_connection(
    sphinx_server: ServerProcess, relay_factory: type[Relay]
) -> None:
    relay = relay_factory(sphinx_server.target)
    stt = voxgate.STT(address=relay.target)
    metrics: list[Any] = []
    stt.on("metrics_collected", metrics.append)
    pcm = one_utterance()
    try:
        first = await livekit_stream(stt, pcm, pace=0)
        client = stt._client
        second = await livekit_stream(stt, pcm, pace=0)
        await stt.recognize(frames(pcm, RATE, 20))
        assert stt._client is client, "one client (one gRPC channel) for the STT's streams and recognitions"
        assert relay.accepted == 1, "...and one TCP connection under it"
    finally:
        await stt.aclose()
    assert first.of("final_transcript")[0].request_id != second.of("final_transcript")[0].request_id
    acquired = [m.connection_reused for m in metrics if m.acquire_time > 0]
    assert acquired == [False, True], "LiveKit's connection metric: new, then reused"


async def test_a_dropped_connection_is_resumed_in_the_same_session(
    sphinx_server: ServerProcess, relay_factory: type[Relay]
) -> None:
    pcm = two_utterances()
    reference = await reference_finals(sphinx_server.target, pcm)
    relay = relay_factory(sphinx_server.target)
    stt = voxgate.STT(address=relay.target, resume=FAST_RESUME)
    errors: list[Any] = []
    stt.on("error", errors.append)

    def cut_after_first_final(event: Any) -> None:
        if event.type.value == "final_transcript" and relay.accepted == 1:
            relay.cut()

    try:
        run = await livekit_stream(stt, pcm, frame_ms=20, pace=2.0, on_event=cut_after_first_final)
    finally:
        await stt.aclose()
    assert relay.accepted == 2, "the connection was cut once and the client reconnected"
    assert not errors, "LiveKit saw no error: the client resumed the session"
    assert run.sequence == UTTERANCE * 2, run.describe()
    check_transcripts(run, reference, seconds_of(pcm))
    session = run.of("final_transcript")[0].request_id
    resumed = [line for line in sphinx_server.log().splitlines() if "session_resumed" in line and session in line]
    assert len(resumed) == 1, "the same session, resumed"


async def test_a_drained_server_is_continued_in_a_new_session(
    tmp_path: Path, sphinx_server: ServerProcess, relay_factory: type[Relay]
) -> None:
    pcm = two_utterances(gap_s=3.0)  # the drain comes between the utterances, none is split at the seam
    reference = await reference_finals(sphinx_server.target, pcm)
    draining = start_server(tmp_path, engine="sphinx")
    relay = relay_factory(draining.target)
    stt = voxgate.STT(address=relay.target, resume=FAST_RESUME)
    errors: list[Any] = []
    stt.on("error", errors.append)
    stopper: list[threading.Thread] = []

    def drain_after_first_final(event: Any) -> None:
        if event.type.value == "final_transcript" and not stopper:
            relay.retarget(sphinx_server.target)  # behind the balancer, another instance
            stopper.append(threading.Thread(target=draining.stop))  # SIGTERM: a graceful drain
            stopper[0].start()

    try:
        run = await livekit_stream(stt, pcm, frame_ms=20, pace=1.0, on_event=drain_after_first_final)
    finally:
        await stt.aclose()
        for t in stopper:
            t.join(30)
        draining.stop()
    assert not errors, "LiveKit saw no error: the client continued in a new session"
    assert "DRAINING" in draining.log() or "draining" in draining.log()
    assert run.sequence == UTTERANCE * 2, run.describe()
    finals = run.of("final_transcript")
    assert [f.alternatives[0].text for f in finals] == reference
    assert finals[0].request_id != finals[1].request_id, "the second utterance in the new session"
    second = finals[1].alternatives[0]
    offset = second.words[0].start_time_offset
    assert second.start_time - offset > 5.5, "offsets go on counting from the start of the stream"


async def test_a_refused_config_is_a_final_error_and_an_unreachable_server_a_connection_error(
    sphinx_server: ServerProcess, unused_tcp_port: int
) -> None:
    no_retry = APIConnectOptions(max_retry=0)
    stt = voxgate.STT(address=sphinx_server.target, sample_rate=4000)  # voxgate takes 8-48 kHz
    try:
        with pytest.raises(APIStatusError) as refused:
            await livekit_stream(stt, bytes(8000), rate=4000, pace=0, conn_options=no_retry)
    finally:
        await stt.aclose()
    assert refused.value.status_code == 400 and not refused.value.retryable
    assert "INVALID_CONFIG" in refused.value.message or "UNSUPPORTED_AUDIO_FORMAT" in refused.value.message
    gone = voxgate.STT(address=f"127.0.0.1:{unused_tcp_port}", resume=False)
    try:
        with pytest.raises(APIConnectionError):
            await gone.recognize(
                frames(one_utterance(), RATE, 20),
                conn_options=APIConnectOptions(max_retry=1, retry_interval=0.0, timeout=5),
            )
    finally:
        await gone.aclose()
