"""The audio of a stream: read once from the caller's iterable, kept until acknowledged.

Each connection gets a sender (the request iterator grpc drains). What a sender does is decided
by one send loop for both clients (voxgate_client.send_loop), over one bookkeeping
(`OutboxBuffer`, voxgate_client.outbox_buffer). The loop does no I/O and never blocks: it yields
what it needs done and a driver here does it: `Outbox` on threads (the blocking client: grpc
drains each sender on a thread of its own) or `AsyncOutbox` on the event loop. A sender of a dead
connection stops, and the next one resends from the buffer, so no item is lost or read twice.

Without resume (`max_unacked=None`) nothing is kept: an item is sent once and forgotten, and
only gRPC's flow control holds the iterable back.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator

from .config import AudioItem, Phrase, StreamConfig
from .outbox_buffer import Entry, OutboxBuffer, Step, checked
from .send_loop import WAIT_S, Answer, Hold, Pause, Request, send_loop

__all__ = ["AsyncOutbox", "Outbox", "OutboxBuffer", "Step", "aiter_items"]


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

    def finalized(self, offset: int) -> None:
        with self._cond:
            self._box.finalized(offset)
            self._cond.notify_all()

    def finalized_offset(self) -> int:
        with self._cond:
            return self._box.finalized_offset()

    def restart_at(self, offset: int) -> int:
        with self._cond:
            start = self._box.restart_at(offset)
            self._cond.notify_all()
            return start

    def phrases_before(self, offset: int) -> tuple[Phrase, ...] | None:
        with self._cond:
            return self._box.phrases_before(offset)

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
        """One connection's requests (see send_loop); `stop` ends them, `answered` is the
        server's first response."""
        loop = send_loop(self._box, first, epoch, stop.is_set)
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
            elif isinstance(op, Answer):
                answered.wait()
            elif isinstance(op, Pause):
                outcome = stop.wait(op.seconds)
            elif isinstance(op, Hold):
                self._hold(op.changes)
            else:
                outcome = self._read(op.next_serial, epoch, stop)

    def _hold(self, changes: int) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._box.changes != changes, WAIT_S)

    def _read(self, next_serial: int, epoch: int, stop: threading.Event) -> Entry | None:
        # One reader of the iterable at a time (a dead connection's sender may still be in it),
        # outside the lock: a source that blocks must not hold up acknowledgements.
        with self._reading:
            with self._cond:
                if self._box.step(next_serial, epoch, stop.is_set())[0] is not Step.READ:
                    return None  # the other reader got an item: it is ours to resend
            try:
                item: AudioItem | None = checked(next(self._items))
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

    def finalized(self, offset: int) -> None:
        self._box.finalized(offset)
        self._changed.set()

    def finalized_offset(self) -> int:
        return self._box.finalized_offset()

    def restart_at(self, offset: int) -> int:
        start = self._box.restart_at(offset)
        self._changed.set()
        return start

    def phrases_before(self, offset: int) -> tuple[Phrase, ...] | None:
        return self._box.phrases_before(offset)

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
        """One connection's requests (see send_loop); `stop` ends them, `answered` is the
        server's first response."""
        loop = send_loop(self._box, first, epoch, stop.is_set)
        outcome: object = None
        while True:
            try:
                op = loop.send(outcome)
            except StopIteration:
                return
            outcome = None
            if isinstance(op, Request):
                yield op
            elif isinstance(op, Answer):
                await answered.wait()
            elif isinstance(op, Pause):
                outcome = await _stopped_within(stop, op.seconds)
            elif isinstance(op, Hold):
                self._changed.clear()  # nothing has run since the loop looked: no change missed
                if self._box.changes == op.changes:
                    await _stopped_within(self._changed, WAIT_S)
            else:
                outcome = await self._read_item()

    async def _read_item(self) -> Entry | None:
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
        return checked(await anext(items))
    except StopAsyncIteration:
        return None
