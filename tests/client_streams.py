"""Run a Python client's `stream` (blocking or asyncio) from a test's thread, one response at a time.

Tests of client behaviour that both clients share (resume, drain) take `client_kind` and drive either.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

from voxgate_client import AsyncSpeechClient, AudioItem, SpeechClient, StreamConfig
from voxgate_client.v1 import speech_pb2 as pb

CLIENT_KINDS = ("blocking", "asyncio")
_DONE = object()


def client_stream(
    kind: str, target: str, config: StreamConfig, audio: Iterable[AudioItem], **kwargs: Any
) -> Iterator[pb.StreamingRecognizeResponse]:
    """`SpeechClient(target).stream(config, audio, **kwargs)`, or the same on AsyncSpeechClient
    (its event loop on a thread of its own, the responses handed over as they arrive; the audio
    from an async source that awaits between items, as a live one does)."""
    if kind == "blocking":
        with SpeechClient(target) as client:
            yield from client.stream(config, audio, **kwargs)
        return
    handed: queue.Queue[object] = queue.Queue()

    async def live_source() -> AsyncIterator[AudioItem]:
        for item in audio:
            await asyncio.sleep(0.001)
            yield item

    async def run() -> None:
        try:
            async with AsyncSpeechClient(target) as client:
                async for response in client.stream(config, live_source(), **kwargs):
                    handed.put(response)
        except BaseException as e:  # noqa: BLE001 - re-raised on the test's thread
            handed.put(e)
        else:
            handed.put(_DONE)

    thread = threading.Thread(target=asyncio.run, args=(run(),), daemon=True)
    thread.start()
    try:
        while (item := handed.get(timeout=180)) is not _DONE:
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, pb.StreamingRecognizeResponse)
            yield item
    finally:
        thread.join(30)
