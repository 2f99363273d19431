"""One connection's send loop, for both clients (`send_loop`): the connection's first request;
then, once the server has answered it (SENDS_AFTER_THE_ANSWER), the items not yet acknowledged,
then new ones from the iterable, paced, and held back while too much audio is unacknowledged.

The loop does no I/O and never blocks: it yields an operation (send a request, wait for the
answer, read the iterable, pause, wait for an acknowledgement) and a driver (voxgate_client.outbox:
on threads or on the event loop) does it and sends back the outcome.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Generator
from dataclasses import dataclass

from ._proto import speech_pb2
from .config import request_for
from .outbox_buffer import Entry, OutboxBuffer, Step

Request = speech_pb2.StreamingRecognizeRequest
WAIT_S = 0.1  # how often a sender held back by unacknowledged audio checks whether to stop
# SENDS_AFTER_THE_ANSWER: a sender sends its config, then waits for the server's first response
# (or the end of the call) before any audio, with or without resume, in both clients. A refusal
# (CAPACITY, DRAINING, a bad config or token, SESSION_ATTACHED on a resume) then arrives before
# any write and before any audio is taken from the caller's iterable; otherwise grpc.aio may
# report the write it fails as INTERNAL and hide the refusal (grpc/grpc#36066). It costs one
# round trip at the start of a connection, while the server starts the session anyway; pacing
# catches up.


# What the send loop asks its driver to do; the driver sends back the outcome.
class Answer(enum.Enum):
    WAIT = "wait for the server's first response (or the end of the call)"  # -> None


@dataclass(frozen=True)
class Read:
    """Read the next item from the iterable and record it (OutboxBuffer.read) -> the new
    Entry, or None: look again (the iterable is exhausted, or another sender read an item)."""

    next_serial: int


@dataclass(frozen=True)
class Pause:
    """Wait `seconds` (pacing) -> whether the connection was stopped meanwhile."""

    seconds: float


@dataclass(frozen=True)
class Hold:
    """Wait for OutboxBuffer.changes to move on from `changes` (an ack, a new connection), or
    WAIT_S at most -> None."""

    changes: int


Op = Request | Answer | Read | Pause | Hold


def send_loop(
    box: OutboxBuffer, first: Request, epoch: int, stopped: Callable[[], bool]
) -> Generator[Op, object, None]:
    """One connection's requests: `first`, then (once the server has answered it) the
    unacknowledged items, then new ones. Yields a Request to send it, or what to wait for."""
    yield first
    yield Answer.WAIT  # see SENDS_AFTER_THE_ANSWER
    next_serial = 0
    while True:
        step, entry = box.step(next_serial, epoch, stopped())
        if step is Step.STOP:
            return
        if step is Step.WAIT:
            yield Hold(box.changes)
            continue
        fresh = step is Step.READ
        if fresh:
            read = yield Read(next_serial)
            if not isinstance(read, Entry):
                continue  # exhausted, or another sender read an item: look again
            entry = read
        assert entry is not None
        next_serial = entry.serial + 1
        delay = box.pace_s(entry, fresh)
        if delay and (yield Pause(delay)):
            return
        box.sending(entry, epoch)
        yield request_for(entry.item)
