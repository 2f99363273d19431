"""The outbox's bookkeeping: what was read from the caller's iterable and not yet acknowledged,
and which connection may send what (`OutboxBuffer`). No I/O, no waits, no locks: the send loop
(voxgate_client.send_loop) consults it and its drivers (voxgate_client.outbox) guard it."""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass

from .config import (
    ITEM_TYPES_ERROR,
    NOT_AUDIO,
    AudioItem,
    Control,
    Phrase,
    SetPhrases,
    StreamConfig,
    audio_item_duration_s,
)
from .pacing import Pacer


@dataclass
class Entry:
    serial: int
    offset: int  # audio bytes of the stream before this item
    item: AudioItem

    @property
    def end(self) -> int:
        return self.offset + (0 if isinstance(self.item, NOT_AUDIO) else len(self.item))


def _covered(entry: Entry, acked: int) -> bool:
    """The server has `entry`: audio up to its end, or a control item with audio after it."""
    return entry.offset < acked if isinstance(entry.item, NOT_AUDIO) else entry.end <= acked


def checked(item: object) -> AudioItem:
    """An item of the caller's iterable, as kept: bytes, Control or SetPhrases (else TypeError)."""
    if isinstance(item, NOT_AUDIO):
        return item
    if isinstance(item, (bytes, bytearray, memoryview)):
        return bytes(item)
    raise TypeError(ITEM_TYPES_ERROR.format(type(item).__name__))


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
        self._buffer: deque[Entry] = deque()
        self._serial = 0
        self._offset = 0  # audio bytes read from the iterable
        self._acked = 0
        # Acknowledged audio after the last final result: kept apart, so that a session lost with
        # its server process can be redone from there (voxgate_client.resume); bounded by
        # max_unacked bytes (a monologue without finals keeps only its newest part).
        self._redo: deque[Entry] = deque()
        self._redo_bytes = 0
        self._finalized = 0
        # Phrase-hint changes read, with their offsets: a new session starts with those in force
        # where its audio starts (the last one before the finalized offset, every one after it).
        self._hint_changes: deque[Entry] = deque()
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
            self._keep_for_redo(self._buffer.popleft())

    def _keep_for_redo(self, entry: Entry) -> None:
        if entry.end <= self._finalized or self._max_unacked is None:
            return
        self._redo.append(entry)
        self._redo_bytes += entry.end - entry.offset
        while self._redo and self._redo_bytes > self._max_unacked:
            self._drop_redo_head()

    def _drop_redo_head(self) -> None:
        head = self._redo.popleft()
        self._redo_bytes -= head.end - head.offset

    def finalized(self, offset: int) -> None:
        """Final results came for the audio before stream offset `offset`."""
        self._finalized = max(self._finalized, offset)
        while self._redo and _covered(self._redo[0], self._finalized):
            self._drop_redo_head()
        while len(self._hint_changes) > 1 and _covered(self._hint_changes[1], self._finalized):
            self._hint_changes.popleft()

    def phrases_before(self, offset: int) -> tuple[Phrase, ...] | None:
        """The phrase hints the iterable set last before stream offset `offset` (None: none)."""
        before = [e.item for e in self._hint_changes if _covered(e, offset)]
        return before[-1].phrases if before and isinstance(before[-1], SetPhrases) else None

    def finalized_offset(self) -> int:
        """The end of the audio whose final results came: a lost session's successor starts
        there (or at the oldest audio still kept, when more than max_unacked went since)."""
        return self._finalized

    def restart_at(self, offset: int) -> int:
        """A new session takes over at stream offset `offset`: what is before it is dropped (an
        audio chunk straddling it is cut there). Returns where the new session's audio starts:
        `offset`, or later when the audio from `offset` on is no longer held."""
        offset = min(offset, self._offset)
        # What was kept for a redo goes before the unacknowledged audio again, from `offset` on.
        self._buffer.extendleft(reversed([e for e in self._redo if not _covered(e, offset)]))
        self._redo.clear()
        self._redo_bytes = 0
        self._finalized = self._acked = offset  # the new session has acknowledged nothing yet
        self.changes += 1
        while self._buffer and _covered(self._buffer[0], offset):
            self._buffer.popleft()
        if self._buffer and self._buffer[0].offset < offset:
            head = self._buffer[0]
            assert not isinstance(head.item, NOT_AUDIO)
            self._buffer[0] = Entry(head.serial, offset, head.item[offset - head.offset :])
        return self._buffer[0].offset if self._buffer else self._offset

    def finished(self) -> bool:
        """The iterable is exhausted and nothing read from it waits to be (re)sent."""
        return self.exhausted and not self._buffer

    def new_epoch(self) -> int:
        self.epoch += 1
        self.changes += 1
        self._sent_below = 0  # nothing is sent on the new connection yet
        return self.epoch

    def step(self, next_serial: int, epoch: int, stopped: bool) -> tuple[Step, Entry | None]:
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

    def read(self, item: AudioItem | None) -> Entry | None:
        """The item just read from the iterable (None: it is exhausted), as a new one to send."""
        if item is None:
            self.exhausted = True
            return None
        entry = Entry(self._serial, self._offset, item)
        self._serial += 1
        self._offset = entry.end
        if isinstance(item, SetPhrases):
            self._hint_changes.append(entry)
        # A keep-alive is never worth resending; without resume nothing is.
        if self._max_unacked is not None and item is not Control.KEEP_ALIVE:
            self._buffer.append(entry)
        return entry

    def pace_s(self, entry: Entry, fresh: bool) -> float:
        """Seconds to wait before sending `entry`: new audio is paced; a resend goes out at once."""
        return self._pacer.delay(audio_item_duration_s(entry.item, self._config)) if fresh else 0.0

    def sending(self, entry: Entry, epoch: int) -> None:
        """`entry` is handed to connection `epoch`."""
        if epoch == self.epoch:
            self._sent_below = max(self._sent_below, entry.serial + 1)
