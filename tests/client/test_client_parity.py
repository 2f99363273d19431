"""The blocking and the asyncio client run one send loop: the same scenario gives the same outcome.

Each scenario runs once with each client, against a fresh in-process fake (scripted drains, drops
and refusals), and the two outcomes must be identical: the responses the caller saw, the error
raised, and what the server received on each stream. Each scenario also checks what that outcome
is, so that "identical" is not "identically wrong".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from tests.client.fake_speech_server import FakeServer
from tests.client_streams import CLIENT_KINDS, client_stream
from voxgate_client import FINALIZE, KEEP_ALIVE, AudioItem, ResumePolicy, StreamConfig, chunks, error_details
from voxgate_client.v1 import speech_pb2 as pb

CONFIG = StreamConfig(encoding="linear16", sample_rate_hz=8000, interim_results=False)
CHUNK = 1600  # 100 ms at 8 kHz LINEAR16
AUDIO = b"".join(bytes([i]) * CHUNK for i in range(1, 11))  # every chunk different: a byte lost or doubled shows
MARK = 4 * CHUNK + 600  # inside the fifth chunk
POLICY = ResumePolicy(backoff_s=0.01, max_backoff_s=0.05)


def plain() -> list[AudioItem]:
    return list(chunks(AUDIO, CHUNK))


def with_controls() -> list[AudioItem]:
    items = plain()
    return [*items[:2], KEEP_ALIVE, *items[2:4], FINALIZE, *items[4:]]


def failing() -> Iterator[AudioItem]:
    yield AUDIO[:CHUNK]
    yield AUDIO[CHUNK : 2 * CHUNK]
    raise OSError("microphone unplugged")


def bad_item() -> Iterator[Any]:
    yield AUDIO[:CHUNK]
    yield 42


@dataclass(frozen=True)
class Scenario:
    name: str
    audio: Callable[[], Any]
    kwargs: dict[str, Any] = field(default_factory=dict)
    script: dict[str, Any] = field(default_factory=dict)  # FakeSpeech attributes
    config: StreamConfig = CONFIG
    kinds: list[str] | None = None  # the response kinds the caller sees
    error: tuple[str, ...] | None = None
    served: bytes | None = AUDIO  # the audio all streams together processed, when it is all of it
    # The client cancels the call (its audio source failed): how much audio reached the server
    # before that is a race, so only what the caller saw is compared.
    cancels: bool = False


@dataclass
class Outcome:
    responses: list[pb.StreamingRecognizeResponse]
    error: tuple[str, ...] | None
    received: list[list[str]] | None  # request kinds per stream (None: a race, see Scenario.cancels)
    audio: list[bytes] | None  # audio processed per stream
    pulled: int = field(compare=False)  # items taken from the iterable (timing-dependent when the server stops early)


SCENARIOS = [
    # Without resume.
    Scenario("plain", with_controls, kinds=["started", "result", "result", "ended"]),
    Scenario("paced", plain, {"pace": 10.0}, kinds=["started", "result", "ended"]),
    Scenario(
        "refused",
        plain,
        config=StreamConfig("linear16", 8000, language_code="fail"),
        kinds=[],
        error=("UNAVAILABLE", "CAPACITY"),
        served=None,
    ),
    Scenario(
        "drained", plain, script={"drain_at_bytes": MARK}, kinds=["started", "result", "ended"], served=AUDIO[:MARK]
    ),
    Scenario(
        "dropped",
        with_controls,
        script={"drop_at_bytes": MARK},
        kinds=["started", "result"],
        error=("UNAVAILABLE", ""),
        served=AUDIO[:MARK],
    ),
    Scenario("dropped after its end", plain, script={"drop_after_end": True}, kinds=["started", "result", "ended"]),
    Scenario("source fails", failing, error=("OSError", "microphone unplugged"), served=None, cancels=True),
    Scenario(
        "bad item",
        bad_item,
        error=("TypeError", "audio items must be bytes, FINALIZE, KEEP_ALIVE or SetPhrases, not int"),
        served=None,
        cancels=True,
    ),
    # With resume.
    Scenario(
        "resume: dropped, the same session goes on",
        plain,
        {"resume": POLICY},
        script={"drop_at_bytes": MARK, "ack_audio": True},
    ),
    Scenario(
        "resume: dropped before any audio, a new session takes over",
        plain,
        {"resume": POLICY},
        script={"drop_at_bytes": 0, "ack_audio": True},
    ),
    Scenario(
        "resume: drained (a server restart), a new session goes on",
        plain,
        {"resume": POLICY},
        script={"drain_at_bytes": MARK, "refuse_after_drain": 2},
        kinds=["started", "result", "ended", "started", "result", "ended"],
    ),
    Scenario(
        "resume: the new session's stream dropped by a proxy",
        plain,
        {"resume": POLICY},
        script={"drain_at_bytes": MARK, "reset_after_drain": True},
        kinds=["started", "result", "ended", "started", "result", "ended"],
    ),
    Scenario(
        "resume: the new session refused too often",
        plain,
        {"resume": ResumePolicy(max_attempts=2, backoff_s=0.01)},
        script={"drain_at_bytes": MARK, "refuse_after_drain": 10},
        kinds=["started", "result", "ended"],
        error=("UNAVAILABLE", "DRAINING"),
        served=AUDIO[:MARK],
    ),
    Scenario(
        "resume: source fails",
        failing,
        {"resume": POLICY},
        error=("OSError", "microphone unplugged"),
        served=None,
        cancels=True,
    ),
]


def run(kind: str, scenario: Scenario) -> Outcome:
    pulled = 0

    def counted() -> Iterator[AudioItem]:
        nonlocal pulled
        for item in scenario.audio():
            pulled += 1
            yield item

    responses: list[pb.StreamingRecognizeResponse] = []
    error: tuple[str, ...] | None = None
    with FakeServer() as server:
        for name, value in scenario.script.items():
            setattr(server.servicer, name, value)
        try:
            for response in client_stream(
                kind, server.target, scenario.config, counted(), timeout=30, **scenario.kwargs
            ):
                responses.append(response)
        except grpc.RpcError as e:
            error = (e.code().name, str(error_details(e).get("reason", "")))
        except Exception as e:  # noqa: BLE001 - the audio iterable's error, compared below
            error = (type(e).__name__, str(e))
        received = None if scenario.cancels else [list(k) for k in server.servicer.received]
        audio = None if scenario.cancels else [bytes(a) for a in server.servicer.audio]
    return Outcome(responses, error, received, audio, pulled)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_blocking_and_asyncio_clients_have_the_same_outcome(scenario: Scenario) -> None:
    blocking, asyncio_ = (run(kind, scenario) for kind in CLIENT_KINDS)
    assert asyncio_ == blocking, f"asyncio client: {asyncio_!r}\nblocking client: {blocking!r}"  # in full: rare

    if scenario.kinds is not None:
        assert [r.WhichOneof("response") for r in blocking.responses if not r.HasField("flow_status")] == scenario.kinds
    assert blocking.error == scenario.error
    if scenario.served is not None:
        assert blocking.audio is not None and b"".join(blocking.audio) == scenario.served, "no audio lost or sent twice"
    if scenario.error is None:
        assert blocking.responses[-1].HasField("ended")
    seqs = [r.seq for r in blocking.responses]
    assert seqs == sorted(set(seqs)), "responses in order, none repeated"
    finals = [r.result.result_id for r in blocking.responses if r.HasField("result") and r.result.is_final]
    sessions = [r.started.session_id for r in blocking.responses if r.HasField("started")]
    assert len(finals) == len(set(finals)) or len(sessions) > 1, "no final result twice"


def test_no_audio_is_taken_before_the_server_answers() -> None:
    # Both clients wait for the server's first response before reading the audio iterable: a
    # refused stream takes none of it (a live source keeps it for the next try).
    scenario = next(s for s in SCENARIOS if s.name == "refused")
    assert [run(kind, scenario).pulled for kind in CLIENT_KINDS] == [0, 0]


def test_a_dropped_stream_resumes_where_the_acknowledgements_left_it() -> None:
    scenario = next(s for s in SCENARIOS if s.name.startswith("resume: dropped,"))
    for kind in CLIENT_KINDS:
        outcome = run(kind, scenario)
        assert outcome.received is not None
        first, resumed = outcome.received
        assert resumed[0] == "config" and resumed.count("audio") == 6, "resent from the unacknowledged chunk"
        assert outcome.audio == [AUDIO[:MARK], AUDIO[MARK:]]
        assert len({r.started.session_id for r in outcome.responses if r.HasField("started")}) == 1
        (final,) = [r.result for r in outcome.responses if r.HasField("result")]
        assert final.text == f"utterance 0 bytes {len(AUDIO)}"


def test_a_session_lost_before_any_audio_is_replaced_with_all_of_it() -> None:
    scenario = next(s for s in SCENARIOS if "before any audio" in s.name)
    for kind in CLIENT_KINDS:
        outcome = run(kind, scenario)
        started = [r.started.session_id for r in outcome.responses if r.HasField("started")]
        assert started == ["fake-1", "fake-3"]  # the resume (stream 2) got SESSION_NOT_FOUND
        assert outcome.audio == [b"", b"", AUDIO]
