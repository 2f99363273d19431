"""A service worker lost under `voxgate serve --workers 2`, by SIGKILL or by a rolling restart: voxgate's own
client loses no call.

The killed worker's sessions are gone with it (their engine sessions end when its connections to the sidecar
do). The client sees its connection drop, its resume finds no session (SESSION_NOT_FOUND), and it opens a new
session that redoes the audio from the end of the last final result it received: every final arrives once,
none is lost. Compared with an undisturbed run of the same audio, the finals are the same, word for word and
(through `voxgate transcribe`) to the 10 ms.

A rolling restart (SIGTERM to one worker, which the parent then restarts) drains the worker's sessions at the
end of each one's utterance in progress: SessionEnded{DRAINING} says how much audio it processed, and the
client goes on in a new session from there. Again the finals are those of an undisturbed run.

On sphinx, whose results depend on the utterance's audio alone. The fake engine names its words by a counter
that runs across the whole session ("alpha bravo ..." goes on from utterance to utterance), so a redo in a new
session names them afresh: right for a fake, not comparable word for word.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from service.bench.driver import OWN_CONNECTION
from tests.helpers import ServerProcess, read_wav_pcm, service_workers, silence, start_server
from voxgate_client import SpeechClient, StreamConfig
from voxgate_client.v1 import speech_pb2 as pb

SESSIONS = 4
ROLLING_SESSIONS = 8
CHUNK = 3200  # 100 ms
PACE = 2.0  # twice real time: long enough to kill a worker mid-stream, short enough for the suite


def speech() -> bytes:
    """Three utterances with pauses between them (about 13 s). PocketSphinx adapts its cepstral mean from
    utterance to utterance, so some clips come out differently after others than at a session's start ("go
    forward ten meters" is "... ten years" first); this one is heard the same wherever a session starts."""
    cards, rate = read_wav_pcm("cards_eight_of_spades.wav")
    assert rate == 16000
    return (cards + silence(1.0)) * 3


def chunks(audio: bytes) -> list[bytes]:
    return [audio[i : i + CHUNK] for i in range(0, len(audio), CHUNK)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(
        tmp_path_factory.mktemp("crash"),
        "--workers",
        "2",
        "--max-sessions",
        str(2 * ROLLING_SESSIONS),
        "--drain-grace-s",
        "30",
        engine="sphinx",
    )
    for worker in service_workers(proc.proc.pid):
        worker.wait_serving()
    yield proc
    proc.stop()


class Call:
    """One client stream in a thread: its responses as they come."""

    def __init__(self, target: str, audio: bytes, pace: float) -> None:
        self._pace = pace
        self.responses: list[pb.StreamingRecognizeResponse] = []
        self.times: list[float] = []  # time.monotonic() of each response
        self.error: BaseException | None = None
        self.token = ""
        self.finals_seen = threading.Event()
        self._client = SpeechClient(target, channel_options=OWN_CONNECTION)  # each its own connection
        self._audio = audio

    def run(self) -> None:
        config = StreamConfig(encoding="linear16", sample_rate_hz=16000)
        try:
            for r in self._client.stream(config, chunks(self._audio), pace=self._pace, timeout=120, resume=True):
                self.responses.append(r)
                self.times.append(time.monotonic())
                if r.HasField("started") and not self.token:
                    self.token = r.started.resume_token
                if r.HasField("result") and r.result.is_final:
                    self.finals_seen.set()
        except BaseException as exc:
            self.error = exc
        finally:
            self._client.close()

    def finals(self) -> list[str]:
        return [r.result.text for r in self.responses if r.HasField("result") and r.result.is_final]

    def final_indexes(self) -> list[int]:
        return [r.result.utterance_index for r in self.responses if r.HasField("result") and r.result.is_final]


def run_calls(server: ServerProcess, during: object = None, sessions: int = SESSIONS, pace: float = PACE) -> list[Call]:
    audio = speech()
    calls = [Call(server.target, audio, pace) for _ in range(sessions)]
    with ThreadPoolExecutor(sessions) as pool:
        done = [pool.submit(c.run) for c in calls]
        if callable(during):
            during(calls)
        for d in done:
            d.result(timeout=180)
    for c in calls:
        assert c.error is None, repr(c.error)
    return calls


def story(c: Call) -> list[str]:
    """What a call saw, for a failure's message."""
    told = []
    for r in c.responses:
        if r.HasField("started"):
            told.append(f"started {r.started.session_id[:8]} resumed={r.started.resumed}")
        elif r.HasField("ended"):
            told.append(f"ended {r.ended.reason} at {r.ended.audio_duration.ToMilliseconds()} ms")
        elif r.HasField("result") and r.result.is_final:
            res = r.result
            told.append(f"final {res.start_offset.ToMilliseconds()}-{res.end_offset.ToMilliseconds()} {res.text}")
    return told


def owner(token: str) -> int:
    return int(token[1 : token.index(".")])


def test_a_worker_sigkill_loses_no_final_and_repeats_none(server: ServerProcess) -> None:
    reference = run_calls(server)
    expected = reference[0].finals()
    assert len(expected) == 3 and all(c.finals() == expected for c in reference), [c.finals() for c in reference]
    killed: list[int] = []
    killed_at: list[float] = []

    def kill_a_worker_mid_call(calls: list[Call]) -> None:
        for c in calls:  # every call has had a final: the redo starts after one, not at the session's start
            assert c.finals_seen.wait(60)
        by_worker = {w.index: w for w in service_workers(server.proc.pid)}
        victim = owner(next(c.token for c in calls if c.token))
        killed_at.append(time.monotonic())
        os.kill(by_worker[victim].pid, signal.SIGKILL)
        killed.append(victim)

    calls = run_calls(server, kill_a_worker_mid_call)
    hit = [c for c in calls if owner(c.token) == killed[0]]
    assert hit, "no call was on the killed worker"
    for c in calls:
        assert c.finals() == expected, (owner(c.token), c.finals())
        indexes = c.final_indexes()
        assert indexes == list(range(len(indexes))), indexes  # one stream: utterance indexes continue
        assert c.responses[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END
    for c in hit:  # the calls on the killed worker went on in a new session (a second `started`)
        assert sum(r.HasField("started") for r in c.responses) == 2
        again = next(t for r, t in zip(c.responses, c.times, strict=True) if t > killed_at[0] and r.HasField("started"))
        print(f"worker SIGKILL: new session {again - killed_at[0]:.3f} s after the kill")
    nothing_held(server)


def nothing_held(server: ServerProcess) -> None:
    """Nothing of the lost worker's sessions is still held anywhere: service, sidecar, engine."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        caps = server.stub().GetCapabilities(pb.GetCapabilitiesRequest(), timeout=10)
        counts = caps.capacity
        if (caps.active_sessions, counts.service_sessions, counts.sidecar_slots, counts.engine_sessions) == (0,) * 4:
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"sessions still held after the calls ended: {caps}")


def test_the_cli_goes_on_after_its_worker_is_killed(server: ServerProcess, tmp_path: Path) -> None:
    import subprocess
    import sys
    import wave

    path = tmp_path / "call.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(speech())
    cli = [sys.executable, "-m", "service", "transcribe", "--server", server.target, "--speed", str(PACE), str(path)]
    undisturbed = subprocess.run(cli, capture_output=True, text=True, timeout=120, check=True).stdout
    proc = subprocess.Popen(cli, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(2.5)  # a final or two in
    for w in service_workers(server.proc.pid):
        os.kill(w.pid, signal.SIGKILL)  # both: whichever holds the call
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert out == undisturbed, (out, err)


def test_a_rolling_restart_of_every_worker_loses_no_final_and_repeats_none(server: ServerProcess) -> None:
    expected = run_calls(server)[0].finals()
    restarted: list[int] = []

    def restart_each_worker_in_turn(calls: list[Call]) -> None:
        for c in calls:
            assert c.finals_seen.wait(60)
        for index in (0, 1):
            old = {w.index: w.pid for w in service_workers(server.proc.pid)}[index]
            os.kill(old, signal.SIGTERM)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                now = {w.index: w for w in service_workers(server.proc.pid)}
                if index in now and now[index].pid != old:
                    now[index].wait_serving()
                    break
                time.sleep(0.1)
            else:
                raise AssertionError(f"worker {index} was not restarted")
            restarted.append(index)

    calls = run_calls(server, restart_each_worker_in_turn, sessions=ROLLING_SESSIONS, pace=1.0)
    assert restarted == [0, 1]
    drained = 0
    for c in calls:
        assert c.finals() == expected, "\n".join([str(owner(c.token)), *story(c)])
        indexes = c.final_indexes()
        assert indexes == list(range(len(indexes))), indexes
        last = c.responses[-1].ended
        # The client's end, or a drain that came after the last audio: the drained session had all of it.
        all_audio_ms = len(speech()) // 32
        assert last.reason == pb.SESSION_END_REASON_CLIENT_END or (
            last.reason == pb.SESSION_END_REASON_DRAINING and last.audio_duration.ToMilliseconds() >= all_audio_ms
        ), last
        drained += any(r.ended.reason == pb.SESSION_END_REASON_DRAINING for r in c.responses if r.HasField("ended"))
    assert drained, "the restarts should have drained live calls"  # later ones may find the calls over
    nothing_held(server)


def test_sigusr2_replaces_every_worker_in_turn_without_losing_a_final(server: ServerProcess) -> None:
    """An upgrade in place: SIGUSR2 to the parent replaces the workers one at a time (each new one runs the
    code installed now); the calls go on with the finals of an undisturbed run."""
    expected = run_calls(server)[0].finals()
    before = {w.index: w.pid for w in service_workers(server.proc.pid)}
    log_start = server.log_path.stat().st_size

    def upgrade(calls: list[Call]) -> None:
        for c in calls:
            assert c.finals_seen.wait(60)
        server.proc.send_signal(signal.SIGUSR2)

    calls = run_calls(server, upgrade)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and '"event": "workers_replaced"' not in server.log()[log_start:]:
        time.sleep(0.2)
    after = {w.index: w.pid for w in service_workers(server.proc.pid)}
    assert sorted(after) == [0, 1] and all(after[i] != before[i] for i in (0, 1)), (before, after)
    for c in calls:
        assert c.finals() == expected, "\n".join([str(owner(c.token)), *story(c)])
        assert [f for f in c.final_indexes()] == list(range(len(expected)))
    assert '"event": "worker_died"' not in server.log()[log_start:], "a replacement is no death"
    nothing_held(server)
