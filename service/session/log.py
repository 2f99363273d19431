"""A session's outgoing responses: numbered, bounded, coalescing, replayable.

Responses are numbered (`seq`) when produced, not when sent, so a client that
resumes after a disconnect can ask again for everything after the last seq it
saw. Memory stays bounded whatever the client does: an undelivered interim
result is replaced in place by a newer interim of the same utterance (the
newer text contains it: text is append-only; the deltas are joined), an
undelivered FlowStatus by a newer one, and delivered items are retained only
up to a bound. What a client that stops reading accumulates is then its final
results and speech events, plus one interim and one FlowStatus.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

from ..events import FlowReport, SessionOutput
from ..limits import RESPONSES_RETAINED
from ..transcript import Result


@dataclass(frozen=True)
class Entry:
    seq: int
    item: SessionOutput


class ResponseLog:
    def __init__(self, retained: int = RESPONSES_RETAINED.value) -> None:
        self._entries: deque[Entry] = deque()  # consecutive seqs
        self._delivered = 0  # highest seq handed to a reader
        self._retained = retained
        self._next_seq = 1
        self._replaceable: dict[object, int] = {}  # coalescing key -> seq of the newest entry with it
        self._changed = asyncio.Event()
        self.closed = False

    def append(self, item: SessionOutput) -> None:
        if self.closed:
            return
        key = _coalescing_key(item)
        seq = self._replaceable.get(key) if key is not None else None
        if seq is not None and seq > self._delivered:
            # Not yet sent: the newer one goes out in its place, keeping the delta the client has not seen.
            index = seq - self._entries[0].seq
            self._entries[index] = Entry(seq, _merged(self._entries[index].item, item))
        else:
            self._entries.append(Entry(self._next_seq, item))
            if key is not None:
                self._replaceable[key] = self._next_seq
            self._next_seq += 1
        if isinstance(item, Result) and item.is_final:
            self._replaceable.pop(("interim", item.channel, item.utterance_index), None)
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
        return self.last_seq - self._delivered

    def _trim(self) -> None:
        while len(self._entries) > self._retained and self._entries[0].seq <= self._delivered:
            self._entries.popleft()

    def _after(self, cursor: int) -> Entry | None:
        """The entry held right after seq `cursor`, as it is now (an undelivered one may have been replaced)."""
        if not self._entries or cursor >= self._entries[-1].seq:
            return None
        return self._entries[max(cursor + 1 - self._entries[0].seq, 0)]

    async def read(self, after_seq: int) -> AsyncIterator[Entry]:
        """Every entry after `after_seq` still held, then new ones as they come, until closed."""
        cursor = after_seq
        while True:
            while (entry := self._after(cursor)) is not None:
                cursor = entry.seq
                self._delivered = max(self._delivered, entry.seq)
                yield entry
                self._trim()
            if self.closed:
                return
            self._changed.clear()
            await self._changed.wait()


def _coalescing_key(item: SessionOutput) -> object | None:
    """Items with the same key supersede each other until delivered (None: never superseded)."""
    if isinstance(item, FlowReport):
        return "flow"
    if isinstance(item, Result) and not item.is_final:
        return ("interim", item.channel, item.utterance_index)  # channels number their utterances apart
    return None


def _merged(old: SessionOutput, new: SessionOutput) -> SessionOutput:
    if isinstance(old, Result) and isinstance(new, Result):
        return replace(new, delta=old.delta + new.delta)
    return new
