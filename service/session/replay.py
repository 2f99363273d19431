"""Audio sent to the engine that its text does not cover yet: replayed into a fresh engine session after a seam."""

from __future__ import annotations

from collections import deque

from .intake import Chunk


class ReplayBuffer:
    """Chunks in the order they were written; trimmed as engine output covers them, bounded by max_ms."""

    def __init__(self, max_ms: int) -> None:
        self._max_ms = max_ms
        self._chunks: deque[Chunk] = deque()

    def written(self, chunk: Chunk) -> None:
        self._chunks.append(chunk)
        # The oldest audio goes first: a replay longer than this is not worth the engine's time.
        while self._chunks and self._chunks[-1].end_ms - self._chunks[0].start_ms > self._max_ms:
            self._chunks.popleft()

    def covered(self, up_to_ms: int) -> None:
        """The engine has turned the audio before up_to_ms into text."""
        while self._chunks and self._chunks[0].end_ms <= up_to_ms:
            self._chunks.popleft()

    def start_ms(self, default_ms: int) -> int:
        """Where a replay starts: the oldest uncovered chunk, else default_ms (all covered)."""
        return self._chunks[0].start_ms if self._chunks else default_ms

    def duration_ms(self) -> int:
        return sum(c.end_ms - c.start_ms for c in self._chunks)

    def snapshot(self) -> list[Chunk]:
        return list(self._chunks)
