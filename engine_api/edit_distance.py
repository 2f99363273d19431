"""Levenshtein distance, shared by the WER of the service's benchmarks (on words) and Whisper's phrase hints (on
letters)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def edit_distance(a: Sequence[T], b: Sequence[T]) -> int:
    """Substitutions + deletions + insertions that turn a into b."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i] + [0] * len(b)
        for j, y in enumerate(b, 1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y))
        previous = current
    return previous[-1]
