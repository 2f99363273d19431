"""The service's audio on its way to a session: bounded, with the markers that end a session."""

from __future__ import annotations

import asyncio
import collections

from voxgate_client import AudioItem


class End:
    """Queue marker: the input is over (the session half-closes and delivers its finals)."""


class Rotate:
    """Queue marker: end this session, and open the next one with the current settings."""


class AudioQueue:
    """Audio for the session, bounded: beyond `max_bytes` (while no session reads, e.g. the
    server is down) the oldest audio is dropped."""

    def __init__(self, max_bytes: int) -> None:
        self._items: collections.deque[AudioItem | End | Rotate] = collections.deque()
        self._bytes = 0
        self._max_bytes = max_bytes
        self._ready = asyncio.Event()
        self.dropped_bytes = 0

    def put(self, item: AudioItem | End | Rotate) -> None:
        self._items.append(item)
        if isinstance(item, bytes):
            self._bytes += len(item)
            while self._bytes > self._max_bytes:
                old = next(i for i in self._items if isinstance(i, bytes))
                self._items.remove(old)
                self._bytes -= len(old)
                self.dropped_bytes += len(old)
        self._ready.set()

    async def get(self) -> AudioItem | End | Rotate:
        while not self._items:
            self._ready.clear()
            await self._ready.wait()
        item = self._items.popleft()
        if isinstance(item, bytes):
            self._bytes -= len(item)
        return item
