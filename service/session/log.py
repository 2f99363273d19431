"""A session's outgoing responses: numbered, bounded, coalescing, replayable.

Responses are numbered (`seq`) when produced, not when sent, so a client that
resumes after a disconnect can ask again for everything after the last seq it
saw. Memory stays bounded whatever the client does: an interim result that
a newer interim of the same utterance supersedes before delivery is replaced
in place (the newer text contains it: text is append-only), only the latest
FlowStatus is kept, and delivered items are retained only up to a bound.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

from ..events import FlowReport, SessionOutput
from ..transcript import Result

RETAINED = 512  # delivered responses kept for a resume


@dataclass(frozen=True)
class Entry:
    seq: int
    item: SessionOutput


class ResponseLog:
    def __init__(self, retained: int = RETAINED) -> None:
        self._entries: deque[Entry] = deque()
        self._delivered = 0  # highest seq handed to a reader
        self._retained = retained
        self._next_seq = 1
        self._changed = asyncio.Event()
        self.closed = False

    def append(self, item: SessionOutput) -> None:
        if self.closed:
            return
        last = self._entries[-1] if self._entries else None
        if last is not None and last.seq > self._delivered and _supersedes(item, last.item):
            # Not yet sent: send the newer one instead, keeping the delta the client has not seen.
            item = _merged(last.item, item)
            self._entries[-1] = Entry(last.seq, item)
        else:
            self._entries.append(Entry(self._next_seq, item))
            self._next_seq += 1
        self._trim()
        self._changed.set()

    def close(self) -> None:
        self.closed = True
        self._changed.set()

    @property
    def last_seq(self) -> int:
        """The seq of the newest response produced (0: none yet)."""
        return self._next_seq - 1

    def pending(self) -> int:
        return sum(1 for e in self._entries if e.seq > self._delivered)

    def _trim(self) -> None:
        while len(self._entries) > self._retained and self._entries[0].seq <= self._delivered:
            self._entries.popleft()

    async def read(self, after_seq: int) -> AsyncIterator[Entry]:
        """Every entry after `after_seq` still held, then new ones as they come, until closed."""
        cursor = after_seq
        while True:
            fresh = [e for e in self._entries if e.seq > cursor]
            for entry in fresh:
                cursor = entry.seq
                self._delivered = max(self._delivered, entry.seq)
                yield entry
            self._trim()
            if self.closed and not any(e.seq > cursor for e in self._entries):
                return
            if not any(e.seq > cursor for e in self._entries):
                self._changed.clear()
                await self._changed.wait()


def _supersedes(new: SessionOutput, old: SessionOutput) -> bool:
    if isinstance(new, FlowReport) and isinstance(old, FlowReport):
        return True
    return (isinstance(new, Result) and isinstance(old, Result) and not new.is_final and not old.is_final
            and new.utterance_index == old.utterance_index)


def _merged(old: SessionOutput, new: SessionOutput) -> SessionOutput:
    if isinstance(old, Result) and isinstance(new, Result):
        return replace(new, delta=old.delta + new.delta)
    return new
