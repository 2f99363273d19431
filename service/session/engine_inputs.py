"""What the inbound half hands the engine half: audio chunks, flushes, hint changes and the close, in a bounded queue.

The queue is the session's backpressure: when it is full the client's stream is not read,
and HTTP/2 flow control holds the client.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from engine_api.phrases import PhraseHint

from ..limits import ENGINE_QUEUE_CHUNKS
from .intake import Chunk


@dataclass(frozen=True)
class Flush:
    """End the current utterance (a client Finalize, or a silence endpoint): the engine answers Flushed."""

    marker: int


@dataclass(frozen=True)
class Close:
    """No more audio: the engine flushes and answers Closed."""


@dataclass(frozen=True)
class SetHints:
    """Replace the session's phrase hints: the engine uses them from its next utterance on."""

    hints: tuple[PhraseHint, ...]


EngineInput = Chunk | Flush | Close | SetHints
EngineQueue = asyncio.Queue[EngineInput]


def engine_queue() -> EngineQueue:
    return asyncio.Queue(maxsize=ENGINE_QUEUE_CHUNKS)
