"""The audio of a resuming stream: read once from the caller's iterable, kept until acknowledged.

Each connection gets a sender (a request iterator grpc drains on its own thread); a sender of a dead
connection stops, and the next one resends from the buffer, so no item is lost or read twice.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ._proto import speech_pb2
from .config import AudioItem, Control, StreamConfig, audio_item_duration_s, request_for
from .pacing import Pacer

Request = speech_pb2.StreamingRecognizeRequest


@dataclass
class _Entry:
    serial: int
    offset: int  # audio bytes of the stream before this item
    item: AudioItem

    @property
    def end(self) -> int:
        return self.offset + (0 if isinstance(self.item, Control) else len(self.item))


class Outbox:
    """The audio iterable, read once, and what was read but not yet acknowledged.

    Each connection gets a sender (a request iterator grpc drains on its own
    thread); a sender of a dead connection stops, and the next one resends
    from the buffer, so no item is lost or read twice from the iterable.
    """

    def __init__(
        self, audio: Iterable[AudioItem], config: StreamConfig, pace: float | None, max_unacked: int
    ) -> None:
        self._items = iter(audio)
        self._config = config
        self._pacer = Pacer(pace)
        self._max_unacked = max_unacked
        self._cond = threading.Condition()
        self._buffer: deque[_Entry] = deque()
        self._serial = 0
        self._offset = 0  # audio bytes read from the iterable
        self._acked = 0
        self._exhausted = False
        self._epoch = 0
        # Entries below this serial went out on the current connection; only those may be released
        # by an ack. A resumed stream must resend every byte from its resume offset, in order (the
        # server skips by count), and acks the server logged before the drop can arrive first.
        self._sent_below = 0
        self.failure: Exception | None = None  # what the caller's iterable raised

    def resume_offset(self) -> int:
        """Where the next connection's audio starts: the oldest unacknowledged item."""
        with self._cond:
            return self._buffer[0].offset if self._buffer else self._offset

    def ack(self, acked_bytes: int) -> None:
        with self._cond:
            self._acked = max(self._acked, acked_bytes)
            while (
                self._buffer
                and self._buffer[0].serial < self._sent_below
                and _covered(self._buffer[0], self._acked)
            ):
                self._buffer.popleft()
            self._cond.notify_all()

    def restart_at(self, offset: int) -> int:
        """A new session takes over at stream offset `offset`: what is before it is dropped (an
        audio chunk straddling it is cut there). Returns where the new session's audio starts:
        `offset`, or later when the audio from `offset` on is no longer held."""
        with self._cond:
            offset = min(offset, self._offset)
            self._acked = max(self._acked, offset)
            while self._buffer and _covered(self._buffer[0], offset):
                self._buffer.popleft()
            if self._buffer and self._buffer[0].offset < offset:
                head = self._buffer[0]
                assert not isinstance(head.item, Control)
                self._buffer[0] = _Entry(head.serial, offset, head.item[offset - head.offset :])
            self._cond.notify_all()
            return self._buffer[0].offset if self._buffer else self._offset

    def finished(self) -> bool:
        """The iterable is exhausted and nothing read from it waits to be (re)sent."""
        with self._cond:
            return self._exhausted and not self._buffer

    def new_epoch(self) -> int:
        with self._cond:
            self._epoch += 1
            self._sent_below = 0  # nothing is sent on the new connection yet
            self._cond.notify_all()
            return self._epoch

    def sender(self, first: Request, epoch: int, stop: threading.Event) -> Iterator[Request]:
        """One connection's requests: `first`, the unacknowledged items, then new ones."""
        yield first
        next_serial = 0
        while True:
            try:
                with self._cond:
                    found = self._next(next_serial, epoch, stop)
            except Exception as e:  # the caller's iterable failed: the caller gets this error
                self.failure = e
                raise
            if found is None:
                return
            entry, fresh = found
            next_serial = entry.serial + 1
            # Pace new audio only; a resend goes out at once.
            if fresh and stop.wait(
                self._pacer.delay(audio_item_duration_s(entry.item, self._config))
            ):
                return
            with self._cond:
                if epoch == self._epoch:
                    self._sent_below = max(self._sent_below, next_serial)
            yield request_for(entry.item)

    def _next(
        self, next_serial: int, epoch: int, stop: threading.Event
    ) -> tuple[_Entry, bool] | None:
        """Under the lock: the next buffered item to resend, else a new one from the iterable."""
        while True:
            if epoch != self._epoch or stop.is_set():
                return None  # this connection is over; the next one resends from the buffer
            for entry in self._buffer:
                if entry.serial >= next_serial:
                    return entry, False
            if self._exhausted:
                return None
            if self._offset - self._acked < self._max_unacked:
                break
            self._cond.wait(0.1)  # too much unacknowledged audio: wait for the server
        try:
            item = next(self._items)
        except StopIteration:
            self._exhausted = True
            return None
        entry = _Entry(self._serial, self._offset, item)
        self._serial += 1
        self._offset = entry.end
        if item is not Control.KEEP_ALIVE:  # a keep-alive is never worth resending
            self._buffer.append(entry)
        return entry, True


def _covered(entry: _Entry, acked: int) -> bool:
    """The server has `entry`: audio up to its end, or a control item with audio after it."""
    return entry.offset < acked if isinstance(entry.item, Control) else entry.end <= acked
