"""Chaos: sidecar SIGKILL and server SIGTERM under load, overload, engine freeze, idle clients.

Timings are measured and printed (`pytest -s`) and written as JSON under the
test's tmp dir; the assertions on them are deliberately generous (a noisy CI box).
"""

from __future__ import annotations

import itertools
import os
import signal
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
from google.protobuf import duration_pb2

from tests.helpers import config_request, error_reason, fake_script, silence, start_server, voiced
from tests.reliability.streams import (
    Recorded,
    live,
    record,
    run_threads,
    speech_pattern,
    uncovered,
    write_measurement,
)
from voxgate_client.v1 import speech_pb2 as pb

SESSIONS = 10
ENDPOINT = pb.EndpointingConfig(silence_ms=500)


def stats(values: list[float]) -> dict[str, float]:
    return {"min": round(min(values), 3), "median": round(statistics.median(values), 3), "max": round(max(values), 3)}


def test_sidecar_sigkill_during_10_live_sessions(tmp_path: Path) -> None:
    audio, spans = speech_pattern(6, voiced_s=1.0, silence_s=1.0)  # 12 s of live audio per session
    server = start_server(tmp_path, "--sidecar-health-interval-s", "0.5", engine="fake")
    try:
        recs, threads = run_threads(
            server, [itertools.chain([config_request(endpointing=ENDPOINT)], live(audio)) for _ in range(SESSIONS)]
        )
        assert all(r.got_final.wait(20) for r in recs), "every session has a final before the kill"
        # Kill mid-utterance (the second one has begun everywhere), so that the first result after
        # the restart measures the recovery, not the wait for the next word.
        assert all(r.wait_for(lambda x: x.HasField("result") and x.result.utterance_index >= 1, 10) for r in recs)
        old_pid = server.sidecar_pid()
        killed_at = time.monotonic()
        os.kill(old_pid, signal.SIGKILL)
        server.wait_health(serving=False, timeout_s=10)
        serving_at = server.wait_health(serving=True, timeout_s=30)
        for t in threads:
            t.join(60)
        assert server.sidecar_pid() != old_pid

        to_warning, to_result = [], []
        for n, rec in enumerate(recs):
            assert rec.error is None, f"session {n}: {rec.error}"
            ended = rec.ended()
            assert ended is not None and ended.reason == pb.SESSION_END_REASON_CLIENT_END, f"session {n}"
            seams = [t for t, w in rec.warnings() if w.code == "ENGINE_RESTARTED"]
            assert len(seams) == 1, f"session {n}: one seam, got {rec.warnings()}"
            seam = seams[0]
            after = [t for t, r in rec.responses if t > seam and r.HasField("result")]
            assert after, f"session {n}: results continue after the restart"
            to_warning.append(seam - killed_at)
            to_result.append(after[0] - killed_at)
            finals = rec.finals()
            assert [r for t, r in finals if t > seam], f"session {n}: finals after the seam"
            results = [r for _, r in finals]
            assert not uncovered(spans, results), f"session {n}: every spoken segment has a final"
            ends = [r.end_offset.ToMilliseconds() for r in results]
            assert ends == sorted(ends), "offsets continue across the seam"
            assert len({r.result_id for r in results}) == len(results), "no final twice"
            assert ended.audio_duration.ToMilliseconds() == len(audio) // 32

        measured = {
            "sessions": SESSIONS,
            "kill_to_ready_s": round(serving_at - killed_at, 3),
            "kill_to_seam_warning_s": stats(to_warning),
            "kill_to_first_result_after_seam_s": stats(to_result),
        }
        print(f"\nsidecar SIGKILL recovery: {measured}")
        write_measurement(tmp_path / "sigkill_recovery.json", measured)
        assert max(to_result) < 20
    finally:
        assert server.stop() == 0


def test_sigterm_drains_10_live_sessions_within_the_grace(tmp_path: Path) -> None:
    grace = 5.0
    audio, spans = speech_pattern(15, voiced_s=1.0, silence_s=1.0)  # 30 s: still talking at SIGTERM
    server = start_server(tmp_path, "--drain-grace-s", str(grace), engine="fake")
    stop = threading.Event()
    try:
        recs, threads = run_threads(
            server,
            [itertools.chain([config_request(endpointing=ENDPOINT)], live(audio, stop)) for _ in range(SESSIONS)],
        )
        assert all(r.got_final.wait(20) for r in recs)
        term_at = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(grace + 10)
        exit_code = server.proc.wait(grace + 10)
        exited_at = time.monotonic()
        stop.set()
        took = []
        for n, rec in enumerate(recs):
            assert rec.error is None, f"session {n}: {rec.error}"
            ended = rec.ended()
            assert ended is not None and ended.reason == pb.SESSION_END_REASON_DRAINING, f"session {n}"
            took.append(rec.responses[-1][0] - term_at)
            heard_ms = ended.audio_duration.ToMilliseconds()
            spoken = [(s, e) for s, e in spans if e <= heard_ms]
            assert spoken and not uncovered(spoken, [r for _, r in rec.finals()]), (
                f"session {n}: every utterance heard before the drain has its final"
            )
        measured = {
            "sessions": SESSIONS,
            "grace_s": grace,
            "sigterm_to_ended_s": stats(took),
            "sigterm_to_exit_s": round(exited_at - term_at, 3),
        }
        print(f"\nSIGTERM drain: {measured}")
        write_measurement(tmp_path / "drain.json", measured)
        assert max(took) < grace
        assert exit_code == 0
    finally:
        stop.set()
        server.stop()


def test_overload_rejects_the_excess_at_once_with_a_retry_delay(tmp_path: Path) -> None:
    capacity = 4
    audio, spans = speech_pattern(2, voiced_s=1.0, silence_s=1.0)
    server = start_server(tmp_path, "--max-sessions", str(capacity), engine="fake")
    barrier = threading.Barrier(2 * capacity)
    outcomes: list[tuple[str, float, Recorded]] = []
    lock = threading.Lock()

    def attempt() -> None:
        rec = Recorded()
        barrier.wait()
        sent = time.monotonic()
        record(server, itertools.chain([config_request(endpointing=ENDPOINT)], live(audio)), rec)
        first = rec.responses[0][0] if rec.responses else rec.ended_at
        with lock:
            outcomes.append(("admitted" if rec.responses else "rejected", first - sent, rec))

    try:
        threads = [threading.Thread(target=attempt) for _ in range(2 * capacity)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        admitted = [rec for kind, _, rec in outcomes if kind == "admitted"]
        rejected = [(latency, rec) for kind, latency, rec in outcomes if kind == "rejected"]
        assert len(admitted) == capacity and len(rejected) == capacity
        for _, rec in rejected:
            assert rec.error is not None
            code, reason, _ = error_reason(rec.error)
            assert (code, reason) == (grpc.StatusCode.UNAVAILABLE, "CAPACITY")
            assert "sessions are in use" in rec.error.details(), "refused by admission, before any engine work"
            assert retry_delay_s(rec.error) > 0
        for rec in admitted:
            assert rec.error is None and rec.ended() is not None
            assert rec.ended().reason == pb.SESSION_END_REASON_CLIENT_END  # type: ignore[union-attr]
            assert not uncovered(spans, [r for _, r in rec.finals()])
        # Keeping up with real time: the session ends soon after its 4 s of live audio.
        durations = [rec.ended_at - rec.started_at for rec in admitted]
        latencies = [latency for latency, _ in rejected]
        measured = {
            "capacity": capacity,
            "attempts": 2 * capacity,
            "rejection_latency_s": stats(latencies),
            "admitted_session_wall_s_for_4s_audio": stats(durations),
        }
        print(f"\noverload: {measured}")
        write_measurement(tmp_path / "overload.json", measured)
        assert max(latencies) < 1.0
        assert max(durations) < 4.0 + 2.0
    finally:
        server.stop()


def retry_delay_s(err: grpc.RpcError) -> float:
    from google.rpc import error_details_pb2, status_pb2

    for key, value in err.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            for detail in status_pb2.Status.FromString(value).details:
                info = error_details_pb2.RetryInfo()
                if detail.Unpack(info):
                    return info.retry_delay.ToNanoseconds() / 1e9
    return 0.0


def test_a_frozen_engine_session_is_reset_and_the_session_keeps_its_finals(tmp_path: Path) -> None:
    # Every engine session stops consuming audio 1.5 s into its own audio; the session's
    # audio is 4.5 s, so it takes a few resets (each replays what the engine had not covered).
    script = fake_script(tmp_path, stall_at_ms=1500)
    audio, spans = speech_pattern(3, voiced_s=1.0, silence_s=0.5)
    server = start_server(tmp_path, "--freeze-timeout-s", "1", engine="fake", model=script)
    try:
        rec = Recorded()
        record(server, itertools.chain([config_request(endpointing=ENDPOINT)], live(audio, speed=2.0)), rec, timeout=60)
        took = rec.ended_at - rec.started_at
        resets = [t for t, w in rec.warnings() if w.code == "ENGINE_RESET"]
        print(
            f"\nfreeze recovery: {len(resets)} resets, session took {took:.2f}s for "
            f"{len(audio) / 32000:.1f}s of audio sent at 2x"
        )
        assert rec.error is None, rec.error
        assert resets, "the frozen engine session was reset"
        ended = rec.ended()
        assert ended is not None and ended.reason == pb.SESSION_END_REASON_CLIENT_END, ended
        assert not ended.message, ended.message
        assert not uncovered(spans, [r for _, r in rec.finals()]), "every spoken segment has its final"
        assert took < 20
    finally:
        server.stop()


def test_a_freeze_at_the_end_is_recovered_even_when_the_flush_deadline_is_shorter(tmp_path: Path) -> None:
    # The client half-closes right after speech the engine has stalled on; the final-flush deadline
    # (1 s) comes before the freeze timeout (5 s): the session resets the engine instead of giving up.
    script = fake_script(tmp_path, stall_at_ms=2000)  # one reset: the replay after it is shorter than 2 s
    audio = voiced(1.0) + silence(0.5) + voiced(1.0)
    server = start_server(
        tmp_path, "--freeze-timeout-s", "5", "--final-flush-timeout-s", "1", engine="fake", model=script
    )
    try:
        rec = Recorded()
        record(server, itertools.chain([config_request()], live(audio, speed=10.0)), rec)
        assert rec.error is None, rec.error
        assert [w.code for _, w in rec.warnings()] == ["ENGINE_RESET"]
        ended = rec.ended()
        assert ended is not None and ended.reason == pb.SESSION_END_REASON_CLIENT_END and not ended.message
        assert not uncovered([(0, 1000), (1500, 2500)], [r for _, r in rec.finals()])
        assert rec.ended_at - rec.started_at < 5
    finally:
        server.stop()


def test_an_engine_that_never_delivers_still_leaves_every_interim_finalized(tmp_path: Path) -> None:
    # Each engine session says one word, then stalls: the session tries a bounded number of resets,
    # then ends; text the client saw as interim results is still closed with a final result.
    script = fake_script(tmp_path, words=[["hello", 200]], stall_at_ms=600)
    server = start_server(
        tmp_path, "--freeze-timeout-s", "30", "--final-flush-timeout-s", "0.5", engine="fake", model=script
    )
    try:
        rec = Recorded()
        record(server, itertools.chain([config_request()], live(voiced(2.0), speed=10.0)), rec)
        assert rec.error is None, rec.error
        ended = rec.ended()
        assert ended is not None and ended.reason == pb.SESSION_END_REASON_CLIENT_END
        assert ended.message == "engine did not deliver final results in time"
        interim_ids = {r.result.result_id for r in rec.items if r.HasField("result") and not r.result.is_final}
        final_ids = [r.result_id for _, r in rec.finals()]
        assert interim_ids and interim_ids <= set(final_ids) and len(final_ids) == len(set(final_ids))
        assert rec.ended_at - rec.started_at < 10
    finally:
        server.stop()


def test_an_idle_client_is_warned_then_timed_out(tmp_path: Path) -> None:
    server = start_server(tmp_path, engine="fake")
    quiet = threading.Event()
    release = threading.Event()

    def requests() -> Iterator[pb.StreamingRecognizeRequest]:
        yield config_request(limits=pb.SessionLimits(idle_timeout=duration_pb2.Duration(seconds=2)))
        yield pb.StreamingRecognizeRequest(audio=voiced(0.3))
        quiet.set()
        release.wait(30)  # the client goes quiet without closing

    try:
        rec = Recorded()
        thread = threading.Thread(target=record, args=(server, requests(), rec, 30))
        thread.start()
        assert quiet.wait(10)
        quiet_at = time.monotonic()
        thread.join(15)
        release.set()
        assert rec.error is None
        kinds = [r.WhichOneof("response") for r in rec.items]
        warned = [(t, w) for t, w in rec.warnings() if w.code == "IDLE_WARNING"]
        assert len(warned) == 1 and warned[0][1].message
        ended = rec.ended()
        assert ended is not None and ended.reason == pb.SESSION_END_REASON_IDLE_TIMEOUT, kinds
        warn_after, end_after = warned[0][0] - quiet_at, rec.responses[-1][0] - quiet_at
        print(
            f"\nidle: warning {warn_after:.2f}s and IDLE_TIMEOUT {end_after:.2f}s after the last message (timeout 2 s)"
        )
        assert 0.8 < warn_after < end_after and 1.8 < end_after < 4.0
    finally:
        release.set()
        server.stop()
