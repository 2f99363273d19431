"""Automatic resume of a streaming session after a dropped connection (both clients).

With resume on, the stream asks for FlowStatus responses and remembers the
session's resume token, the last response `seq` it received and the last
acknowledged audio offset (`FlowStatus.acked_audio_bytes`). Audio sent since
that acknowledgement is kept in a bounded buffer. When the connection breaks
mid-stream (UNAVAILABLE, before the session's `ended`), the client reconnects
with backed-off retries for as long as the server holds the session (its
resume window, unless ResumePolicy says otherwise), presents the token, the
last seq and the offset it resends from, and resends the buffered audio; the
server skips what it already has and sends again the responses after that
seq. Results are de-duplicated by result id, so a caller never sees a final
result twice. A server that still holds the session for the old connection
(it has not seen that one die yet) refuses with SESSION_ATTACHED: that is
retried too, for up to `ResumePolicy.attached_wait_s`.

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

When the server process that held the session dies (a crashed worker of `voxgate serve
--workers N`), the resume finds no session (SESSION_NOT_FOUND) although the session had heard
audio. With `ResumePolicy.restart_lost_sessions` (the default) the client then opens a new
session and resends from the end of the last final result it received: for this the outbox
keeps the acknowledged audio after the last final (voxgate_client.outbox_buffer). The
utterance in progress is transcribed again, so no final is lost or repeated; the timeline
goes on as after a drain (utterance indexes count finals only).

A stream without resume runs the same way, with policy None: one connection and no retries,
nothing kept for resending, no FlowStatus asked for, every response passed on as it came. Both
clients, with resume or not, send what the one send loop of voxgate_client.outbox decides.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import replace

import grpc

from ._proto import speech_pb2, speech_pb2_grpc
from .config import (
    AudioItem,
    StreamConfig,
    config_request,
)
from .outbox import AsyncOutbox, Outbox
from .responses import ends_with_ok, error_details, is_aio_failed_write
from .resume_policy import DEFAULT_RESUME_WINDOW_S, ResumePolicy
from .timeline import Timeline

__all__ = ["ResumePolicy", "resuming_stream", "resuming_stream_async"]

Response = speech_pb2.StreamingRecognizeResponse
Request = speech_pb2.StreamingRecognizeRequest
Metadata = Sequence[tuple[str, str | bytes]]

# Only a transport failure is resumed; a status the server chose (with an ErrorInfo) is final,
# but for SESSION_ATTACHED on a resume: the server has not yet seen the old connection go;
# and SESSION_NOT_FOUND for a session that had heard nothing: the server ends a session whose
# client vanished before any audio (nothing to resume), so a new one takes over.
RESUMABLE = frozenset({grpc.StatusCode.UNAVAILABLE})
STILL_ATTACHED = "SESSION_ATTACHED"
NOT_FOUND = "SESSION_NOT_FOUND"


def _connection_lost(error: grpc.RpcError) -> bool:
    """A transport failure: UNAVAILABLE; a CANCELLED the server never sends and we did not ask
    for (a proxy resetting the stream, e.g. nginx as an upstream goes away); grpc.aio's failed
    write."""
    if error.code() in RESUMABLE or is_aio_failed_write(error):
        return True
    return error.code() == grpc.StatusCode.CANCELLED and "reason" not in error_details(error)


_Outbox = Outbox | AsyncOutbox


def _first_config(config: StreamConfig, policy: ResumePolicy | None) -> Request:
    """The first request of a new session; with resume, it asks for FlowStatus (the acks)."""
    request = config_request(config)
    if policy is not None:
        request.config.flow_status.enabled = True
        request.config.flow_status.interval_ms = policy.flow_status_interval_ms
    return request


def _resume_config(token: str, last_seq: int, audio_bytes: int) -> Request:
    return Request(
        config=speech_pb2.StreamingConfig(
            resume_token=token, resume_last_seq=last_seq, resume_audio_bytes=audio_bytes
        )
    )


class _Resumer:
    """The decisions of a stream, shared by the blocking and the asyncio client: what to pass to
    the caller, whether and when to reconnect, and the first request of each connection.

    `policy` None: no resume, i.e. no retries: the one connection's responses pass unchanged and
    its error is raised (but after a clean `ended`, where a lost connection is the normal end)."""

    def __init__(
        self,
        config: StreamConfig,
        policy: ResumePolicy | None,
        outbox: _Outbox,
        timeout: float | None,
    ) -> None:
        self._policy = policy
        self._outbox = outbox
        self._timeline = Timeline(config)
        self._config = config
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._token, self._last_seq = "", 0  # of the current session
        self._finalized: set[str] = set()
        self._failures = 0
        self._lost_since: float | None = None  # the first failed reconnect of this disconnect
        self._resume_window_s = DEFAULT_RESUME_WINDOW_S  # the session's, once it said so
        self._attached_since: float | None = (
            None  # the first SESSION_ATTACHED refusal of this reconnect
        )
        self._attached_tries = 0
        self._reopening = False  # opening a session that replaces a drained one
        self._ended = self._drained = False
        self.ended_ok = False  # the session ended and the server closes its stream with OK
        self._processed = 0  # audio bytes the session says it processed, when it ended
        self._heard = False  # the current session acknowledged audio or sent a result
        # One recognition (mono, downmix, first): its finals mark where a lost session can be
        # redone from. Channels recognized apart finalize at their own moments: not redone.
        self._one_recognition = config.channels == 1 or config.channel_mode != "separate"
        self.request = _first_config(config, policy)

    def remaining_s(self) -> float | None:
        return None if self._deadline is None else max(self._deadline - time.monotonic(), 0.0)

    def connecting(self) -> None:
        self._ended = self._drained = self.ended_ok = False
        self._processed = 0

    def passes(self, response: Response) -> bool:
        """Take in a response; whether the caller sees it (shifted onto the stream's timeline)."""
        if self._policy is None:  # one connection, one session: nothing to skip or shift
            if response.HasField("ended"):
                self.ended_ok = ends_with_ok(response.ended)
            return True
        self._failures, self._lost_since = 0, None
        self._attached_since, self._attached_tries = None, 0
        if response.seq and response.seq <= self._last_seq:
            return False  # already delivered before the reconnect
        self._last_seq = max(self._last_seq, response.seq)
        kind = response.WhichOneof("response")
        if kind == "started" and response.started.resumed:
            return False  # the same session goes on: the caller sees one unbroken stream
        if kind == "started" and response.started.resume_token:
            self._token = response.started.resume_token
            if response.started.HasField("resume_window"):
                self._resume_window_s = response.started.resume_window.ToTimedelta().total_seconds()
        elif kind == "flow_status":
            self._heard = self._heard or response.flow_status.acked_audio_bytes > 0
            self._outbox.ack(self._timeline.audio_bytes + response.flow_status.acked_audio_bytes)
        elif kind == "ended":
            self._ended = True
            self.ended_ok = ends_with_ok(response.ended)
            self._drained = response.ended.reason == speech_pb2.SESSION_END_REASON_DRAINING
            self._processed = self._timeline.bytes_of(response.ended.audio_duration)
        elif kind == "result":
            self._heard = True
            if response.result.result_id in self._finalized:
                return False  # never a result of an utterance already final
            if response.result.is_final:
                self._finalized.add(response.result.result_id)
        self._timeline.apply(response)
        if kind == "result" and response.result.is_final and self._one_recognition:
            # On the stream's timeline now: the audio before its end has its final results.
            self._outbox.finalized(self._timeline.bytes_of(response.result.end_offset))
        return True

    def delay_after(self, error: grpc.RpcError) -> float | None:
        """A connection failed with `error`: seconds to wait before the next one, or None when the
        stream in fact ended normally. Raises to give up: `error`, or the audio iterable's own."""
        if self._outbox.failure is not None:
            raise self._outbox.failure from error
        if self.ended_ok and _connection_lost(error):
            return None  # the session ended cleanly; how its connection then went does not matter
        delay = self._retry_delay_s(error)
        if delay is None:
            raise error
        return delay

    def _retry_delay_s(self, error: grpc.RpcError) -> float | None:
        """Seconds to wait before reconnecting after `error`; None: give up (raise it)."""
        policy = self._policy
        if policy is None or self._ended or not (self._token or self._reopening):
            return None
        if self._token and error_details(error).get("reason") == NOT_FOUND:
            if self._heard and not (policy.restart_lost_sessions and self._one_recognition):
                return None
            # The session is gone: it ended before it had any audio (nothing to resume), or
            # its server process died with it (a worker crash). A new session redoes the
            # audio from the end of the last final result on: every final once, none lost.
            self._start_new_session(self._outbox.restart_at(self._outbox.finalized_offset()))
            return policy.backoff_s
        if self._token and error_details(error).get("reason") == STILL_ATTACHED:
            now = time.monotonic()
            self._attached_since = now if self._attached_since is None else self._attached_since
            if now - self._attached_since > policy.attached_wait_s:
                return None
            self._attached_tries += 1
            delay = policy.delay_s(self._attached_tries)
        elif _connection_lost(error):
            now = time.monotonic()
            self._lost_since = now if self._lost_since is None else self._lost_since
            self._failures += 1
            delay = policy.delay_s(self._failures)
            if policy.max_attempts is not None and self._failures > policy.max_attempts:
                return None
            if now + delay - self._lost_since > policy.window_s(self._resume_window_s):
                return None
        else:
            return None
        if self._deadline is not None and time.monotonic() + delay >= self._deadline:
            return None
        return delay

    def reconnecting(self) -> None:
        """After the retry delay: the next connection's first request."""
        if self._token:
            offset = self._outbox.resume_offset() - self._timeline.audio_bytes
            self.request = _resume_config(self._token, self._last_seq, offset)
        else:  # the replacement of a drained session was refused (e.g. DRAINING): again
            self.request = _first_config(self._config, self._policy)

    def next_session(self) -> bool:
        """The stream ended without an error: whether to go on in a new session (after a drain)."""
        if not (self._drained and self._policy is not None and self._policy.reconnect_on_drain):
            return False
        # Drained: everything the session processed has its final results; go on from there.
        start = self._outbox.restart_at(self._timeline.audio_bytes + self._processed)
        if self._outbox.finished():
            return False  # the drained session had all the audio there is
        self._start_new_session(start)
        return True

    def _start_new_session(self, start: int) -> None:
        """The next connection opens a new session whose audio starts at stream offset `start`."""
        self._timeline.new_session(start)
        self._token, self._last_seq, self._finalized, self._heard = "", 0, set(), False
        self._reopening = True
        if (phrases := self._outbox.phrases_before(start)) is not None:  # the hints in force there
            self._config = replace(self._config, phrases=phrases)
        self.request = _first_config(self._config, self._policy)


def _max_unacked(policy: ResumePolicy | None) -> int | None:
    return None if policy is None else policy.max_unacked_bytes


def resuming_stream(
    stub: speech_pb2_grpc.SpeechStub,
    config: StreamConfig,
    audio: Iterable[AudioItem],
    *,
    pace: float | None,
    metadata: Metadata | None,
    timeout: float | None,
    policy: ResumePolicy | None,
) -> Iterator[Response]:
    """SpeechClient.stream, with automatic resume unless `policy` is None (see the module
    docstring)."""
    outbox = Outbox(audio, config, pace, _max_unacked(policy))
    resumer = _Resumer(config, policy, outbox, timeout)
    while True:
        epoch = outbox.new_epoch()
        stop, answered = threading.Event(), threading.Event()
        call = stub.StreamingRecognize(
            outbox.sender(resumer.request, epoch, stop, answered),
            metadata=metadata,
            timeout=resumer.remaining_s(),
        )
        resumer.connecting()
        try:
            for response in call:
                answered.set()
                if resumer.passes(response):
                    yield response
        except grpc.RpcError as e:
            delay = resumer.delay_after(e)
            if delay is not None:
                time.sleep(delay)
                resumer.reconnecting()
                continue
        finally:
            stop.set()  # wake the sender's waits; it ends with its connection
            answered.set()
            call.cancel()
        if not resumer.next_session():
            return


async def resuming_stream_async(
    stub: speech_pb2_grpc.SpeechStub,
    config: StreamConfig,
    audio: AsyncIterable[AudioItem] | Iterable[AudioItem],
    *,
    pace: float | None,
    metadata: Metadata | None,
    timeout: float | None,
    policy: ResumePolicy | None,
) -> AsyncIterator[Response]:
    """AsyncSpeechClient.stream: the same behaviour as resuming_stream, on grpc.aio."""
    outbox = AsyncOutbox(audio, config, pace, _max_unacked(policy))
    resumer = _Resumer(config, policy, outbox, timeout)
    try:
        while True:
            epoch = outbox.new_epoch()
            stop, answered = asyncio.Event(), asyncio.Event()
            call = stub.StreamingRecognize(
                outbox.sender(resumer.request, epoch, stop, answered),
                metadata=metadata,
                timeout=resumer.remaining_s(),
            )
            resumer.connecting()
            try:
                async for response in call:
                    answered.set()
                    if resumer.passes(response):
                        yield response
            except asyncio.CancelledError as e:
                # grpc.aio cancels the call when the audio iterable fails: the caller gets it.
                if outbox.failure is not None:
                    raise outbox.failure from e
                raise
            except grpc.RpcError as e:
                delay = resumer.delay_after(e)
                if delay is not None:
                    await asyncio.sleep(delay)
                    resumer.reconnecting()
                    continue
            finally:
                stop.set()
                answered.set()
                call.cancel()
            if not resumer.next_session():
                return
    finally:
        outbox.close()
