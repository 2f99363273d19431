"""The Pipecat STT service (clients/pipecat-voxgate) in a real Pipecat pipeline -- an audio file
source, VoxgateSTTService, a collector (tests/integrations/pipecat_driver.py, in the Pipecat venv) --
against a real voxgate server on the embedded engine."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from tests.helpers import ServerProcess, start_server, word_error_rate
from tests.integrations.drive import (
    TRUTH,
    PipecatRun,
    one_utterance,
    reference_finals,
    run_pipecat,
    seconds_of,
    two_utterances,
)
from tests.relay import Relay

FAST_RESUME = {"backoff_s": 0.05, "flow_status_interval_ms": 100}
UTTERANCE = [
    "ProposedUserStartedSpeakingFrame",
    "InterimTranscriptionFrame",
    "TranscriptionFrame",
    "ProposedUserStoppedSpeakingFrame",
]


def check_transcripts(run: PipecatRun, reference: list[str], audio_s: float) -> None:
    """Finals as voxgate's own client gets them, near the truth; interims that grow into them; word
    timings in order, inside their result and the audio; the server's language on every frame."""
    finals = run.frames("TranscriptionFrame")
    assert [f["text"] for f in finals] == reference, run.stderr[-3000:]
    for final, truth in zip(finals, TRUTH.values(), strict=False):
        assert word_error_rate(truth, final["text"]) <= 0.25
        assert final["finalized"] and final["result"]["is_final"]
    interims = run.frames("InterimTranscriptionFrame")
    assert len(interims) >= 2 * len(finals)
    for before, after in zip(interims, interims[1:], strict=False):
        if before["result"]["result_id"] == after["result"]["result_id"]:
            assert after["text"].startswith(before["text"]), "interims of an utterance only append"
    for frame in [*interims, *finals]:
        assert frame["language"] == "en-US", "the language the server applied"
        result = frame["result"]
        assert " ".join(w["word"] for w in result["words"]) == frame["text"], "word timings"
        previous_end = 0.0
        for w in result["words"]:
            assert result["start_s"] <= w["start_s"] <= w["end_s"] <= result["end_s"]
            assert previous_end <= w["start_s"] and w["end_s"] <= audio_s
            previous_end = w["end_s"]


def sequence_message(run: PipecatRun) -> str:
    return "\n".join(
        f"{line['t']:7.3f} {line['kind']} {line.get('type', line.get('name', ''))} "
        f"{line.get('text', line.get('args', ''))!r}"
        for line in run.lines
    )


def test_pipeline_gives_speech_events_interims_finals_words_and_language(
    pipecat_python: Path, sphinx_server: ServerProcess, tmp_path: Path
) -> None:
    pcm = two_utterances()
    reference = _reference(sphinx_server, pcm)
    run = run_pipecat(pipecat_python, tmp_path, pcm, target=sphinx_server.target, pace=1.0, vad_events=True)
    assert run.sequence == UTTERANCE * 2, sequence_message(run)
    assert run.all_received()
    check_transcripts(run, reference, seconds_of(pcm))
    finals = run.frames("TranscriptionFrame")
    assert len({f["result"]["session_id"] for f in finals}) == 1
    started = [e["args"][0] for e in run.events("on_speech_started")]
    stopped = [e["args"][0] for e in run.events("on_speech_stopped")]
    assert len(started) == len(stopped) == 2
    for start, stop, final in zip(started, stopped, finals, strict=True):
        words = final["result"]["words"]
        assert abs(start - words[0]["start_s"]) < 0.3, "speech starts where its first word does"
        assert words[-1]["end_s"] <= stop < words[-1]["end_s"] + 0.6, "...and ends after its last"
    assert len(run.events("on_session_started")) == 1 and len(run.events("on_connected")) == 1


def test_audio_pushed_all_at_once_keeps_each_utterance_between_its_speech_events(
    pipecat_python: Path, sphinx_server: ServerProcess, tmp_path: Path
) -> None:
    # Unpaced, voxgate's speech detection runs ahead of the engine: the second utterance's
    # SPEECH_STARTED (and the first's SPEECH_ENDED) come before the first one's text and final.
    pcm = two_utterances()
    reference = _reference(sphinx_server, pcm)
    run = run_pipecat(pipecat_python, tmp_path, pcm, target=sphinx_server.target, pace=0, vad_events=True)
    assert run.sequence == UTTERANCE * 2, sequence_message(run)
    assert run.all_received()
    assert [f["text"] for f in run.frames("TranscriptionFrame")] == reference


def test_vad_stop_finalizes_the_utterance_without_waiting_for_the_endpoint(
    pipecat_python: Path, sphinx_server: ServerProcess, tmp_path: Path
) -> None:
    # A 5 s endpoint: only the finalize (Pipecat's VAD stop) can close the utterance while audio goes on.
    pcm = one_utterance() + bytes(2 * 16000 * 2)
    run = run_pipecat(
        pipecat_python,
        tmp_path,
        pcm,
        target=sphinx_server.target,
        pace=1.0,
        wait_for_session=True,
        endpointing_silence_ms=5000,
        finalize_at_s=[2.6],
    )
    finals = run.frames("TranscriptionFrame")
    assert len(finals) == 1, sequence_message(run)
    assert finals[0]["t"] < run.first("audio_done")["t"] - 1.0, "final well before the audio ended"
    assert word_error_rate(TRUTH["go_forward.wav"], finals[0]["text"]) <= 0.25


def test_keyterms_updated_mid_call_apply_from_the_next_utterance(
    pipecat_python: Path, fake_server: ServerProcess, tmp_path: Path
) -> None:
    # The fake engine's words are the hinted phrases' words: which key terms an utterance was heard with shows.
    # Pipecat's audio frames are system frames and overtake a settings frame: played at twice real time, the
    # update lands in the silence between the utterances (0.45 s of wall time before the second).
    gap_s = seconds_of(one_utterance()) - 0.6  # inside the silence after the first utterance
    pcm = two_utterances()
    run = run_pipecat(
        pipecat_python,
        tmp_path,
        pcm,
        target=fake_server.target,
        pace=2.0,
        keyterms=["Ozempic"],
        keyterms_at_s=[[gap_s, ["Siobhan Kowalczyk"]]],
    )
    finals = [set(f["text"].split()) for f in run.frames("TranscriptionFrame")]
    assert len(finals) == 2 and finals[0] == {"Ozempic"}, sequence_message(run)
    assert finals[1] and finals[1] <= {"Siobhan", "Kowalczyk"}, sequence_message(run)
    assert len(run.events("on_session_started")) == 1, "the same session: no reconnect"


def test_a_language_update_starts_the_next_session_on_the_same_connection(
    pipecat_python: Path, sphinx_server: ServerProcess, tmp_path: Path, relay_factory: type[Relay]
) -> None:
    pcm = two_utterances()
    reference = _reference(sphinx_server, pcm)
    relay = relay_factory(sphinx_server.target)
    # STTUpdateSettingsFrame(language=...) between the utterances: the session ends with its
    # finals and the next one opens with the new language, on the service's one gRPC channel.
    run = run_pipecat(pipecat_python, tmp_path, pcm, target=relay.target, pace=2.0, language_at_s=[[3.6, "en-US"]])
    sessions = [e["args"][0] for e in run.events("on_session_started")]
    assert len(sessions) == 2, sequence_message(run)
    assert relay.accepted == 1, "one connection for both sessions"
    finals = run.frames("TranscriptionFrame")
    assert [f["text"] for f in finals] == reference
    assert [f["result"]["session_id"] for f in finals] == sessions
    second = finals[1]["result"]
    assert second["start_s"] > 4.0, "offsets count from the start of the service's audio, across sessions"


def test_a_dropped_connection_is_resumed_in_the_same_session(
    pipecat_python: Path, sphinx_server: ServerProcess, tmp_path: Path, relay_factory: type[Relay]
) -> None:
    pcm = two_utterances()
    reference = _reference(sphinx_server, pcm)
    relay = relay_factory(sphinx_server.target)

    def cut_after_first_final(line: dict[str, Any]) -> None:
        if line["kind"] == "frame" and line["type"] == "TranscriptionFrame" and relay.accepted == 1:
            relay.cut()

    run = run_pipecat(
        pipecat_python,
        tmp_path,
        pcm,
        on_line=cut_after_first_final,
        target=relay.target,
        pace=2.0,
        vad_events=True,
        resume=FAST_RESUME,
    )
    assert relay.accepted == 2, "the connection was cut once and the client reconnected"
    assert not run.events("on_connection_error"), "no error reached the pipeline: the session was resumed"
    assert run.sequence == UTTERANCE * 2, sequence_message(run)
    assert run.all_received()
    check_transcripts(run, reference, seconds_of(pcm))
    sessions = {f["result"]["session_id"] for f in run.frames("TranscriptionFrame")}
    assert len(sessions) == 1 and len(run.events("on_session_started")) == 1
    resumed = [
        line for line in sphinx_server.log().splitlines() if "session_resumed" in line and next(iter(sessions)) in line
    ]
    assert len(resumed) == 1, "the same session, resumed"


def test_a_drained_server_is_continued_in_a_new_session(
    pipecat_python: Path, sphinx_server: ServerProcess, tmp_path: Path, relay_factory: type[Relay]
) -> None:
    pcm = two_utterances(gap_s=3.0)  # the drain comes between the utterances, none is split at the seam
    reference = _reference(sphinx_server, pcm)
    draining = start_server(tmp_path, engine="sphinx")
    relay = relay_factory(draining.target)
    stopper: list[threading.Thread] = []

    def drain_after_first_final(line: dict[str, Any]) -> None:
        if line["kind"] == "frame" and line["type"] == "TranscriptionFrame" and not stopper:
            relay.retarget(sphinx_server.target)  # behind the balancer, another instance
            stopper.append(threading.Thread(target=draining.stop))  # SIGTERM: a graceful drain
            stopper[0].start()

    try:
        run = run_pipecat(
            pipecat_python,
            tmp_path,
            pcm,
            on_line=drain_after_first_final,
            target=relay.target,
            pace=1.0,
            wait_for_session=True,
            vad_events=True,
            resume=FAST_RESUME,
        )
    finally:
        for t in stopper:
            t.join(30)
        draining.stop()
    assert not run.events("on_connection_error"), "no error reached the pipeline: a new session took over"
    assert run.sequence == UTTERANCE * 2, sequence_message(run)
    assert run.all_received()
    finals = run.frames("TranscriptionFrame")
    assert [f["text"] for f in finals] == reference
    assert finals[0]["result"]["session_id"] != finals[1]["result"]["session_id"]
    assert finals[1]["result"]["start_s"] > 5.5, "offsets go on counting from the start of the stream"


def test_a_refused_config_stops_the_service_with_an_error(
    pipecat_python: Path, sphinx_server: ServerProcess, tmp_path: Path
) -> None:
    # voxgate takes 8-48 kHz: a 4 kHz pipeline is refused (INVALID_ARGUMENT), which a new session
    # would meet again; the service reports it upstream and stops, and the pipeline still ends.
    run = run_pipecat(
        pipecat_python, tmp_path, bytes(8000), target=sphinx_server.target, pace=0, sample_rate=4000, retry_delay_s=0.05
    )
    errors = [line for line in run.lines if line["kind"] == "upstream" and line["type"] == "ErrorFrame"]
    assert len(errors) == 1 and "INVALID_ARGUMENT" in errors[0]["error"], sequence_message(run)
    assert len(run.events("on_connection_error")) == 1
    assert not run.frames("TranscriptionFrame")


def _reference(server: ServerProcess, pcm: bytes) -> list[str]:
    import asyncio

    return asyncio.run(reference_finals(server.target, pcm))
