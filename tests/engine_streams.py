"""Drive one engine session in-process: push audio in chunks (flushing where asked), close, collect every output.

The engine tests (tests/engine, tests/gpu: Voxtral) and the engine contract (tests/unit: every light engine) share it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from engine_api.audio import BYTES_PER_MS
from engine_api.outputs import Closed, Delta, Diagnostic, EngineOutput, Flushed
from engine_sidecar.engines.engine import EngineSession


@dataclass
class Result:
    outputs: list[EngineOutput] = field(default_factory=list)

    @property
    def deltas(self) -> list[Delta]:
        return [o for o in self.outputs if isinstance(o, Delta)]

    @property
    def token_ids(self) -> list[int]:
        return [t for d in self.deltas for t in d.token_ids]

    @property
    def diagnostics(self) -> list[Diagnostic]:
        return [o for o in self.outputs if isinstance(o, Diagnostic)]

    @property
    def flushes(self) -> list[Flushed]:
        return [o for o in self.outputs if isinstance(o, Flushed)]

    @property
    def closed(self) -> Closed | None:
        last = self.outputs[-1] if self.outputs else None
        return last if isinstance(last, Closed) else None


async def stream(
    session: EngineSession,
    pcm: bytes,
    chunk_ms: int = 80,
    *,
    speech: Any = True,
    pace_s: float = 0.0,
    start_delay_s: float = 0.0,
    flush_at_ms: int | None = None,
    after_chunk: Callable[[int, Result], Awaitable[None]] | None = None,
) -> Result:
    """Push pcm in chunks (speech: bool or ms -> bool), optionally paced; close; collect every output.
    `after_chunk(at_ms, result so far)` runs after each chunk (at_ms: where the chunk starts)."""
    result = Result()

    async def read() -> None:
        async for out in session.outputs():
            result.outputs.append(out)

    reader = asyncio.create_task(read())
    await asyncio.sleep(start_delay_s)
    step = chunk_ms * BYTES_PER_MS
    for i in range(0, len(pcm), step):
        at_ms = i // BYTES_PER_MS
        await session.push_audio(pcm[i : i + step], speech(at_ms) if callable(speech) else speech)
        if flush_at_ms is not None and at_ms <= flush_at_ms < at_ms + chunk_ms:
            await session.flush(7)
        if after_chunk is not None:
            await after_chunk(at_ms, result)
        if pace_s:
            await asyncio.sleep(pace_s)
    await session.close()
    await reader
    return result
