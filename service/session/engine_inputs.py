"""What the inbound half hands the engine half: audio chunks, flushes and the close, through a bounded queue.

The queue is the session's backpressure: when it is full the client's stream is not read,
and HTTP/2 flow control holds the client.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ..limits import ENGINE_QUEUE_CHUNKS
from .intake import Chunk


@dataclass(frozen=True)
class Flush:
    """End the current utterance (a client Finalize, or a silence endpoint): the engine answers Flushed."""

    marker: int


@dataclass(frozen=True)
class Close:
    """No more audio: the engine flushes and answers Closed."""


EngineInput = Chunk | Flush | Close
EngineQueue = asyncio.Queue[EngineInput]


def engine_queue() -> EngineQueue:
    return asyncio.Queue(maxsize=ENGINE_QUEUE_CHUNKS)
