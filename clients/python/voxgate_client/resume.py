"""Automatic resume of a streaming session after a dropped connection (blocking client).

With resume on, the stream asks for FlowStatus responses and remembers the
session's resume token, the last response `seq` it received and the last
acknowledged audio offset (`FlowStatus.acked_audio_bytes`). Audio sent since
that acknowledgement is kept in a bounded buffer. When the connection breaks
mid-stream (UNAVAILABLE, before the session's `ended`), the client reconnects
with bounded, backed-off retries, presents the token, the last seq and the
offset it resends from, and resends the buffered audio; the server skips what
it already has and sends again the responses after that seq. Results are
de-duplicated by result id, so a caller never sees a final result twice. A
server that still holds the session for the old connection (it has not seen
that one die yet) refuses with SESSION_ATTACHED: that is retried too, for up to
`ResumePolicy.attached_wait_s`.

When the server ends the session with SessionEnded{DRAINING} (it is shutting
down gracefully) while there is still audio to send, the session cannot be
resumed: it is over, and its resume token only ever worked on that instance.
With `ResumePolicy.reconnect_on_drain` (the default) the client then opens a new
session with the same config on the same target (a load balancer sends it to
another instance) and carries on. The drained session has already delivered
the final results of all the audio it processed, and its `ended` says how much
that was (`audio_duration`): the new session starts at exactly that point of
the stream, so its audio is neither lost nor transcribed twice. The client
resends from its buffer what the drained session did not process (trimming a
chunk that straddles the point), then goes on with the iterable.

The seam is visible, and the stream still reads as one: the caller sees the
drained session's `ended` (reason DRAINING), then the new session's `started`
(a new session id, `resumed` false). From there on the client shifts the new
session's responses so that `seq`, `utterance_index` and every audio offset
(results, words, speech events, FlowStatus) continue those of the sessions
before it, offsets counting from the start of the stream's audio.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import grpc
from google.protobuf import duration_pb2

from ._proto import speech_pb2, speech_pb2_grpc
from .config import (
    AudioItem,
    StreamConfig,
    config_request,
)
from .encodings import bytes_per_sample
from .outbox import Outbox
from .responses import error_details

__all__ = ["ResumePolicy", "resuming_stream"]

Response = speech_pb2.StreamingRecognizeResponse
Request = speech_pb2.StreamingRecognizeRequest
Metadata = Sequence[tuple[str, str | bytes]]

# Only a transport failure is resumed; a status the server chose (with an ErrorInfo) is final,
# but for SESSION_ATTACHED on a resume: the server has not yet seen the old connection go.
RESUMABLE = frozenset({grpc.StatusCode.UNAVAILABLE})
STILL_ATTACHED = "SESSION_ATTACHED"


@dataclass(frozen=True)
class ResumePolicy:
    """How a stream with `resume=` reconnects.

    max_attempts: reconnects tried in a row for one disconnect (reset once a
      reconnected stream delivers a response); then the last error is raised.
    backoff_s / max_backoff_s: the first delay between attempts, doubled each time up to the max.
    max_unacked_bytes: audio kept for resending; when the server's
      acknowledgements fall this far behind, no more audio is read from the
      iterable until they catch up (the same backpressure the server applies).
    flow_status_interval_ms: how often the server acknowledges audio.
    reconnect_on_drain: after SessionEnded{DRAINING} with audio still to send,
      open a new session (same config, same target: behind a balancer, another
      instance) and continue there; opening it is retried on UNAVAILABLE like a
      reconnect (a balancer may first pick the draining instance, which refuses
      with DRAINING). False: the stream ends with the drained session.
    attached_wait_s: how long a resume refused with SESSION_ATTACHED is retried
      (backed off like a reconnect, not counted in max_attempts). The server
      holds the session for the old connection until it sees that one go: at
      once for a reset connection, after its keepalive fails (20 s + 10 s by
      default) for one that died silently.
    """

    max_attempts: int = 5
    backoff_s: float = 0.2
    max_backoff_s: float = 5.0
    max_unacked_bytes: int = 4 * 1024 * 1024
    flow_status_interval_ms: int = 200
    reconnect_on_drain: bool = True
    attached_wait_s: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.backoff_s < 0 or self.max_unacked_bytes <= 0:
            raise ValueError(
                "max_attempts >= 1, backoff_s >= 0 and max_unacked_bytes > 0 are required"
            )
        if self.flow_status_interval_ms <= 0:
            raise ValueError("flow_status_interval_ms must be positive")
        if self.attached_wait_s < 0:
            raise ValueError("attached_wait_s must be >= 0")


def _first_config(config: StreamConfig, interval_ms: int) -> Request:
    request = config_request(config)
    request.config.flow_status.enabled = True
    request.config.flow_status.interval_ms = interval_ms
    return request


def _resume_config(token: str, last_seq: int, audio_bytes: int) -> Request:
    return Request(
        config=speech_pb2.StreamingConfig(
            resume_token=token, resume_last_seq=last_seq, resume_audio_bytes=audio_bytes
        )
    )


def _shift(offset: duration_pb2.Duration, ns: int) -> None:
    offset.FromNanoseconds(offset.ToNanoseconds() + ns)


class _Timeline:
    """Makes the successive sessions of one stream (after drains) read as one to the caller.

    The first session's responses pass unchanged. After a seam, each response of the new
    session gets the `seq`, `utterance_index` and audio offsets of the sessions before it added.
    """

    def __init__(self, config: StreamConfig) -> None:
        self._rate = config.sample_rate_hz
        self._bytes_per_sample = bytes_per_sample(config.encoding)
        self.audio_bytes = 0  # stream audio before the current session's
        self._audio_ns = 0
        self._seq = 0  # responses of the sessions before the current one
        self._utterances = 0
        self._last_seq = 0  # highest seq passed to the caller
        self._next_utterance = 0  # one past the highest utterance_index passed to the caller

    def bytes_of(self, duration: duration_pb2.Duration) -> int:
        """Whole samples of audio in `duration`, in bytes of the stream's encoding."""
        samples = duration.ToNanoseconds() * self._rate // 1_000_000_000
        return int(samples) * self._bytes_per_sample

    def new_session(self, audio_bytes: int) -> None:
        """The next session's audio starts at stream offset `audio_bytes`."""
        self.audio_bytes = audio_bytes
        samples = audio_bytes // self._bytes_per_sample
        self._audio_ns = samples * 1_000_000_000 // self._rate
        self._seq = self._last_seq
        self._utterances = self._next_utterance

    def apply(self, response: Response) -> None:
        if self._seq or self._audio_ns or self._utterances:
            self._shift(response)
        self._last_seq = max(self._last_seq, response.seq)
        if response.HasField("result"):
            self._next_utterance = max(self._next_utterance, response.result.utterance_index + 1)

    def _shift(self, response: Response) -> None:
        ns = self._audio_ns
        if response.seq:
            response.seq += self._seq
        kind = response.WhichOneof("response")
        if kind == "result":
            result = response.result
            result.utterance_index += self._utterances
            for field in (result.start_offset, result.end_offset):
                _shift(field, ns)
            for word in result.words:
                _shift(word.start_offset, ns)
                _shift(word.end_offset, ns)
        elif kind == "speech_event" and response.speech_event.HasField("offset"):
            _shift(response.speech_event.offset, ns)
        elif kind == "flow_status":
            response.flow_status.acked_audio_bytes += self.audio_bytes
            _shift(response.flow_status.acked_audio_offset, ns)


def resuming_stream(
    stub: speech_pb2_grpc.SpeechStub,
    config: StreamConfig,
    audio: Iterable[AudioItem],
    *,
    pace: float | None,
    metadata: Metadata | None,
    timeout: float | None,
    policy: ResumePolicy,
) -> Iterator[Response]:
    """SpeechClient.stream with automatic resume (see the module docstring)."""
    outbox = Outbox(audio, config, pace, policy.max_unacked_bytes)
    timeline = _Timeline(config)
    deadline = None if timeout is None else time.monotonic() + timeout
    token, last_seq = "", 0  # of the current session
    finalized: set[str] = set()
    failures = 0
    attached_since: float | None = None  # the first SESSION_ATTACHED refusal of this reconnect
    attached_tries = 0
    reopening = False  # opening a session that replaces a drained one
    request = _first_config(config, policy.flow_status_interval_ms)
    while True:
        epoch = outbox.new_epoch()
        stop = threading.Event()
        remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        call = stub.StreamingRecognize(
            outbox.sender(request, epoch, stop), metadata=metadata, timeout=remaining
        )
        ended = drained = False
        processed = 0  # audio bytes the session says it processed, when it ended
        try:
            for response in call:
                failures, attached_since, attached_tries = 0, None, 0
                if response.seq and response.seq <= last_seq:
                    continue  # already delivered before the reconnect
                last_seq = max(last_seq, response.seq)
                kind = response.WhichOneof("response")
                if kind == "started" and response.started.resumed:
                    continue  # the same session goes on: the caller sees one unbroken stream
                if kind == "started" and response.started.resume_token:
                    token = response.started.resume_token
                elif kind == "flow_status":
                    outbox.ack(timeline.audio_bytes + response.flow_status.acked_audio_bytes)
                elif kind == "ended":
                    ended = True
                    drained = response.ended.reason == speech_pb2.SESSION_END_REASON_DRAINING
                    processed = timeline.bytes_of(response.ended.audio_duration)
                elif kind == "result":
                    if response.result.result_id in finalized:
                        continue  # never a result of an utterance already final
                    if response.result.is_final:
                        finalized.add(response.result.result_id)
                timeline.apply(response)
                yield response
        except grpc.RpcError as e:
            if outbox.failure is not None:
                raise outbox.failure from e
            code = e.code()
            if ended or not (token or reopening):
                raise
            if token and error_details(e).get("reason") == STILL_ATTACHED:
                now = time.monotonic()
                attached_since = now if attached_since is None else attached_since
                if now - attached_since > policy.attached_wait_s:
                    raise
                attached_tries += 1
                delay = min(policy.backoff_s * 2 ** (attached_tries - 1), policy.max_backoff_s)
            elif code in RESUMABLE:
                failures += 1
                if failures > policy.max_attempts:
                    raise
                delay = min(policy.backoff_s * 2 ** (failures - 1), policy.max_backoff_s)
            else:
                raise
            if deadline is not None and time.monotonic() + delay >= deadline:
                raise
            time.sleep(delay)
            if token:
                offset = outbox.resume_offset() - timeline.audio_bytes
                request = _resume_config(token, last_seq, offset)
            else:  # the replacement of a drained session was refused (e.g. DRAINING): again
                request = _first_config(config, policy.flow_status_interval_ms)
            continue
        finally:
            stop.set()  # wake the sender's pacing wait; it ends with its connection
            call.cancel()
        if not (drained and policy.reconnect_on_drain):
            return
        # Drained: everything the session processed has its final results; go on from there.
        start = outbox.restart_at(timeline.audio_bytes + processed)
        if outbox.finished():
            return  # the drained session had all the audio there is
        timeline.new_session(start)
        token, last_seq, finalized = "", 0, set()
        reopening = True
        request = _first_config(config, policy.flow_status_interval_ms)
