"""The audio of a stream: read once from the caller's iterable, kept until acknowledged.

Each connection gets a sender (the request iterator grpc drains). What a sender does is decided
by one send loop, `_send_loop`, for both clients: the connection's first request; then, once the
server has answered it (SENDS_AFTER_THE_ANSWER), the items not yet acknowledged, then new ones
from the iterable, paced, and held back while too much audio is unacknowledged. The loop does no
I/O and never blocks: it yields what it needs done (send a request, wait for the answer, read
the iterable, pause, wait for an acknowledgement) and a driver does it: `Outbox` on threads (the
blocking client: grpc drains each sender on a thread of its own) or `AsyncOutbox` on the event
loop. A sender of a dead connection stops, and the next one resends from the buffer, so no item
is lost or read twice. `OutboxBuffer` is the bookkeeping.

Without resume (`max_unacked=None`) nothing is kept: an item is sent once and forgotten, and
only gRPC's flow control holds the iterable back.
"""

from __future__ import annotations

import asyncio
import enum
import threading
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Callable, Generator, Iterable, Iterator
from dataclasses import dataclass

from ._proto import speech_pb2
from .config import AudioItem, Control, StreamConfig, audio_item_duration_s, request_for
from .pacing import Pacer

Request = speech_pb2.StreamingRecognizeRequest
WAIT_S = 0.1  # how often a sender held back by unacknowledged audio checks whether to stop
# SENDS_AFTER_THE_ANSWER: a sender sends its config, then waits for the server's first response
# (or the end of the call) before any audio, with or without resume, in both clients. A refusal
# (CAPACITY, DRAINING, a bad config or token, SESSION_ATTACHED on a resume) then arrives before
# any write and before any audio is taken from the caller's iterable; otherwise grpc.aio may
# report the write it fails as INTERNAL and hide the refusal (grpc/grpc#36066). It costs one
# round trip at the start of a connection, while the server starts the session anyway; pacing
# catches up.


@dataclass
class _Entry:
    serial: int
    offset: int  # audio bytes of the stream before this item
    item: AudioItem

    @property
    def end(self) -> int:
        return self.offset + (0 if isinstance(self.item, Control) else len(self.item))


def _covered(entry: _Entry, acked: int) -> bool:
    """The server has `entry`: audio up to its end, or a control item with audio after it."""
    return entry.offset < acked if isinstance(entry.item, Control) else entry.end <= acked


def _checked(item: object) -> AudioItem:
    """An item of the caller's iterable, as kept: bytes or a Control (else TypeError)."""
    if isinstance(item, Control):
        return item
    if isinstance(item, (bytes, bytearray, memoryview)):
        return bytes(item)
    raise TypeError(f"audio items must be bytes, FINALIZE or KEEP_ALIVE, not {type(item).__name__}")


class Step(enum.Enum):
    STOP = "stop"  # this connection is over (or the iterable is done and all is sent)
    RESEND = "resend"  # a buffered item goes out again
    READ = "read"  # take the next item from the iterable
    WAIT = "wait"  # too much unacknowledged audio: wait for the server


class OutboxBuffer:
    """What was read from the iterable but not yet acknowledged, and where each connection is.

    `max_unacked`: audio bytes kept unacknowledged before reading stops; None: keep nothing (no
    resume). Not thread-safe: `Outbox` holds a lock around it; `AsyncOutbox` runs on one event
    loop.
    """

    def __init__(self, config: StreamConfig, pace: float | None, max_unacked: int | None) -> None:
        self._config = config
        self._pacer = Pacer(pace)
        self._max_unacked = max_unacked
        self._buffer: deque[_Entry] = deque()
        self._serial = 0
        self._offset = 0  # audio bytes read from the iterable
        self._acked = 0
        self.exhausted = False
        self.epoch = 0
        self.changes = 0  # counts acks and new connections: what a held-back sender waits for
        # Entries below this serial went out on the current connection; only those may be released
        # by an ack. A resumed stream must resend every byte from its resume offset, in order (the
        # server skips by count), and acks the server logged before the drop can arrive first.
        self._sent_below = 0

    def resume_offset(self) -> int:
        """Where the next connection's audio starts: the oldest unacknowledged item."""
        return self._buffer[0].offset if self._buffer else self._offset

    def ack(self, acked_bytes: int) -> None:
        self._acked = max(self._acked, acked_bytes)
        self.changes += 1
        while (
            self._buffer
            and self._buffer[0].serial < self._sent_below
            and _covered(self._buffer[0], self._acked)
        ):
            self._buffer.popleft()

    def restart_at(self, offset: int) -> int:
        """A new session takes over at stream offset `offset`: what is before it is dropped (an
        audio chunk straddling it is cut there). Returns where the new session's audio starts:
        `offset`, or later when the audio from `offset` on is no longer held."""
        offset = min(offset, self._offset)
        self._acked = max(self._acked, offset)
        self.changes += 1
        while self._buffer and _covered(self._buffer[0], offset):
            self._buffer.popleft()
        if self._buffer and self._buffer[0].offset < offset:
            head = self._buffer[0]
            assert not isinstance(head.item, Control)
            self._buffer[0] = _Entry(head.serial, offset, head.item[offset - head.offset :])
        return self._buffer[0].offset if self._buffer else self._offset

    def finished(self) -> bool:
        """The iterable is exhausted and nothing read from it waits to be (re)sent."""
        return self.exhausted and not self._buffer

    def new_epoch(self) -> int:
        self.epoch += 1
        self.changes += 1
        self._sent_below = 0  # nothing is sent on the new connection yet
        return self.epoch

    def step(self, next_serial: int, epoch: int, stopped: bool) -> tuple[Step, _Entry | None]:
        """What the sender of connection `epoch`, having sent up to `next_serial`, does next."""
        if epoch != self.epoch or stopped:
            return Step.STOP, None  # this connection is over; the next one resends from the buffer
        for entry in self._buffer:
            if entry.serial >= next_serial:
                return Step.RESEND, entry
        if self.exhausted:
            return Step.STOP, None
        if self._max_unacked is None or self._offset - self._acked < self._max_unacked:
            return Step.READ, None
        return Step.WAIT, None

    def read(self, item: AudioItem | None) -> _Entry | None:
        """The item just read from the iterable (None: it is exhausted), as a new one to send."""
        if item is None:
            self.exhausted = True
            return None
        entry = _Entry(self._serial, self._offset, item)
        self._serial += 1
        self._offset = entry.end
        # A keep-alive is never worth resending; without resume nothing is.
        if self._max_unacked is not None and item is not Control.KEEP_ALIVE:
            self._buffer.append(entry)
        return entry

    def pace_s(self, entry: _Entry, fresh: bool) -> float:
        """Seconds to wait before sending `entry`: new audio is paced; a resend goes out at once."""
        return self._pacer.delay(audio_item_duration_s(entry.item, self._config)) if fresh else 0.0

    def sending(self, entry: _Entry, epoch: int) -> None:
        """`entry` is handed to connection `epoch`."""
        if epoch == self.epoch:
            self._sent_below = max(self._sent_below, entry.serial + 1)


# What the send loop asks its driver to do; the driver sends back the outcome.
class _Answer(enum.Enum):
    WAIT = "wait for the server's first response (or the end of the call)"  # -> None


@dataclass(frozen=True)
class _Read:
    """Read the next item from the iterable and record it (OutboxBuffer.read) -> the new
    _Entry, or None: look again (the iterable is exhausted, or another sender read an item)."""

    next_serial: int


@dataclass(frozen=True)
class _Pause:
    """Wait `seconds` (pacing) -> whether the connection was stopped meanwhile."""

    seconds: float


@dataclass(frozen=True)
class _Hold:
    """Wait for OutboxBuffer.changes to move on from `changes` (an ack, a new connection), or
    WAIT_S at most -> None."""

    changes: int


_Op = Request | _Answer | _Read | _Pause | _Hold


def _send_loop(
    box: OutboxBuffer, first: Request, epoch: int, stopped: Callable[[], bool]
) -> Generator[_Op, object, None]:
    """One connection's requests: `first`, then (once the server has answered it) the
    unacknowledged items, then new ones. Yields a Request to send it, or what to wait for."""
    yield first
    yield _Answer.WAIT  # see SENDS_AFTER_THE_ANSWER
    next_serial = 0
    while True:
        step, entry = box.step(next_serial, epoch, stopped())
        if step is Step.STOP:
            return
        if step is Step.WAIT:
            yield _Hold(box.changes)
            continue
        fresh = step is Step.READ
        if fresh:
            read = yield _Read(next_serial)
            if not isinstance(read, _Entry):
                continue  # exhausted, or another sender read an item: look again
            entry = read
        assert entry is not None
        next_serial = entry.serial + 1
        delay = box.pace_s(entry, fresh)
        if delay and (yield _Pause(delay)):
            return
        box.sending(entry, epoch)
        yield request_for(entry.item)


class Outbox:
    """The blocking client's outbox: grpc drains each sender on its own thread."""

    def __init__(
        self,
        audio: Iterable[AudioItem],
        config: StreamConfig,
        pace: float | None,
        max_unacked: int | None,
    ) -> None:
        self._items = iter(audio)
        self._cond = threading.Condition()
        self._reading = threading.Lock()
        self._box = OutboxBuffer(config, pace, max_unacked)
        self.failure: Exception | None = None  # what the caller's iterable raised

    def resume_offset(self) -> int:
        with self._cond:
            return self._box.resume_offset()

    def ack(self, acked_bytes: int) -> None:
        with self._cond:
            self._box.ack(acked_bytes)
            self._cond.notify_all()

    def restart_at(self, offset: int) -> int:
        with self._cond:
            start = self._box.restart_at(offset)
            self._cond.notify_all()
            return start

    def finished(self) -> bool:
        with self._cond:
            return self._box.finished()

    def new_epoch(self) -> int:
        with self._cond:
            epoch = self._box.new_epoch()
            self._cond.notify_all()
            return epoch

    def sender(
        self, first: Request, epoch: int, stop: threading.Event, answered: threading.Event
    ) -> Iterator[Request]:
        """One connection's requests (see _send_loop); `stop` ends them, `answered` is the
        server's first response."""
        loop = _send_loop(self._box, first, epoch, stop.is_set)
        outcome: object = None
        while True:
            with self._cond:  # the loop's bookkeeping; its waits are below, outside the lock
                try:
                    op = loop.send(outcome)
                except StopIteration:
                    return
            outcome = None
            if isinstance(op, Request):
                yield op
            elif isinstance(op, _Answer):
                answered.wait()
            elif isinstance(op, _Pause):
                outcome = stop.wait(op.seconds)
            elif isinstance(op, _Hold):
                self._hold(op.changes)
            else:
                outcome = self._read(op.next_serial, epoch, stop)

    def _hold(self, changes: int) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._box.changes != changes, WAIT_S)

    def _read(self, next_serial: int, epoch: int, stop: threading.Event) -> _Entry | None:
        # One reader of the iterable at a time (a dead connection's sender may still be in it),
        # outside the lock: a source that blocks must not hold up acknowledgements.
        with self._reading:
            with self._cond:
                if self._box.step(next_serial, epoch, stop.is_set())[0] is not Step.READ:
                    return None  # the other reader got an item: it is ours to resend
            try:
                item: AudioItem | None = _checked(next(self._items))
            except StopIteration:
                item = None
            except Exception as e:  # the caller's iterable failed: the caller gets this error
                self.failure = e
                raise
            with self._cond:
                return self._box.read(item)


async def aiter_items(
    audio: AsyncIterable[AudioItem] | Iterable[AudioItem],
) -> AsyncIterator[AudioItem]:
    """Audio items from an async or a plain iterable (a plain one must not block)."""
    if isinstance(audio, AsyncIterable):
        async for item in audio:
            yield item
    else:
        for item in audio:
            yield item


async def _stopped_within(stop: asyncio.Event, seconds: float) -> bool:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        return False
    return True


class AsyncOutbox:
    """The asyncio client's outbox: grpc.aio drains each sender on the event loop."""

    def __init__(
        self,
        audio: AsyncIterable[AudioItem] | Iterable[AudioItem],
        config: StreamConfig,
        pace: float | None,
        max_unacked: int | None,
    ) -> None:
        self._items = aiter_items(audio)
        self._box = OutboxBuffer(config, pace, max_unacked)
        self._read: asyncio.Future[AudioItem | None] | None = (
            None  # a read of the iterable under way
        )
        self._changed = asyncio.Event()  # an ack or a new connection: a waiting sender looks again
        self.failure: Exception | None = None

    def resume_offset(self) -> int:
        return self._box.resume_offset()

    def ack(self, acked_bytes: int) -> None:
        self._box.ack(acked_bytes)
        self._changed.set()

    def restart_at(self, offset: int) -> int:
        start = self._box.restart_at(offset)
        self._changed.set()
        return start

    def finished(self) -> bool:
        return self._box.finished()

    def new_epoch(self) -> int:
        epoch = self._box.new_epoch()
        self._changed.set()
        return epoch

    def close(self) -> None:
        """The stream is over: stop a read of the iterable still under way."""
        if self._read is not None:
            self._read.cancel()
            self._read = None

    async def sender(
        self, first: Request, epoch: int, stop: asyncio.Event, answered: asyncio.Event
    ) -> AsyncIterator[Request]:
        """One connection's requests (see _send_loop); `stop` ends them, `answered` is the
        server's first response."""
        loop = _send_loop(self._box, first, epoch, stop.is_set)
        outcome: object = None
        while True:
            try:
                op = loop.send(outcome)
            except StopIteration:
                return
            outcome = None
            if isinstance(op, Request):
                yield op
            elif isinstance(op, _Answer):
                await answered.wait()
            elif isinstance(op, _Pause):
                outcome = await _stopped_within(stop, op.seconds)
            elif isinstance(op, _Hold):
                self._changed.clear()  # nothing has run since the loop looked: no change missed
                if self._box.changes == op.changes:
                    await _stopped_within(self._changed, WAIT_S)
            else:
                outcome = await self._read_item()

    async def _read_item(self) -> _Entry | None:
        # The read runs in a task of its own: grpc.aio cancels a dead connection's sender, and
        # that cancellation must not land in the caller's source (it would end it). The next
        # sender takes the item over; exactly one sender claims each read.
        if self._read is None:
            self._read = asyncio.ensure_future(_next_item(self._items))
        read = self._read
        try:
            item = await asyncio.shield(read)
        except Exception as e:  # the caller's iterable failed: the caller gets this error
            self.failure = e
            raise
        if self._read is not read:
            return None  # another sender claimed it: it is in the buffer, ours to resend
        self._read = None
        return self._box.read(item)


async def _next_item(items: AsyncIterator[AudioItem]) -> AudioItem | None:
    try:
        return _checked(await anext(items))
    except StopAsyncIteration:
        return None
