"""The engine's decoder, shared by its sessions: finals first, then interims oldest first, on `workers`
decodes at a time (one per core: a one-thread decode of tiny.en costs less CPU than a two-thread one and
takes about as long, docs/benchmarks.md).

A decode costs about the same whatever the buffer's length (the encoder's padded window), so the queue never
holds more than one interim and one final per session: a session asks for its next interim only when its
last one is done, so when decoding falls behind each stream's interims come less often (always on its latest
audio) while finals wait only for the decode in progress.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from engine_sidecar.engines.whisper.decoder import Hypothesis, WhisperDecoder


@dataclass(frozen=True)
class DecodeRequest:
    pcm16: bytes
    offset_ms: int
    prompt: str = ""  # the text of the utterance before this audio
    language: str = "en"
    whole: bool = False  # all of the audio's words (WhisperDecoder.transcribe), not one decode
    phrases: tuple[str, ...] = ()  # phrase hints (whole only), the strongest first


@dataclass
class _Job:
    owner: object
    request: DecodeRequest
    queued_at: float
    done: asyncio.Future[Hypothesis | None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class DecodeQueue:
    def __init__(self, decoder: WhisperDecoder, workers: int = 1, clock: Callable[[], float] = time.monotonic) -> None:
        self._decoder = decoder
        self._workers = workers
        self._clock = clock
        self._finals: deque[_Job] = deque()
        self._interims: deque[_Job] = deque()
        self._wake = asyncio.Event()
        self._busy_since: dict[int, float] = {}  # worker → when its decode in progress started
        self._tasks: list[asyncio.Task[None]] = []
        self.decodes = 0
        self.decode_s = 0.0

    def start(self) -> None:
        self._tasks = [asyncio.ensure_future(self._run(i)) for i in range(self._workers)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for job in (*self._finals, *self._interims):
            job.done.cancel()

    async def final(self, owner: object, request: DecodeRequest) -> Hypothesis:
        """The hypothesis that ends an utterance (or a segment of one): ahead of every interim."""
        result = await self._submit(self._finals, owner, request)
        assert result is not None
        return result

    async def interim(self, owner: object, request: DecodeRequest) -> Hypothesis | None:
        """A re-decode of an utterance so far; None when the owner withdrew it before it started."""
        return await self._submit(self._interims, owner, request)

    def withdraw(self, owner: object) -> None:
        """Drop the owner's jobs not yet started (a flush, or a session gone): their callers get None."""
        for queue in (self._finals, self._interims):
            for job in [j for j in queue if j.owner is owner]:
                queue.remove(job)
                if not job.done.done():
                    job.done.set_result(None)

    def lag_s(self) -> float:
        """How long the oldest job not yet started has waited: 0 while every job has a worker. A long decode
        in progress is not lag: it is one session's work on one worker, and the other workers still serve
        (admission asks this, so one session's long decodes never refuse new ones while workers are free)."""
        now = self._clock()
        return max((now - j.queued_at for j in (*self._finals, *self._interims)), default=0.0)

    def busy_s(self) -> float:
        """How long the oldest decode in progress has run (0 when idle): a hung decoder shows here."""
        return max((self._clock() - t for t in self._busy_since.values()), default=0.0)

    async def _submit(self, queue: deque[_Job], owner: object, request: DecodeRequest) -> Hypothesis | None:
        job = _Job(owner, request, self._clock())
        queue.append(job)
        self._wake.set()
        try:
            return await asyncio.shield(job.done)
        except asyncio.CancelledError:
            if job in queue:
                queue.remove(job)
            raise

    async def _run(self, worker: int) -> None:
        while True:
            if not self._finals and not self._interims:
                self._wake.clear()
                await self._wake.wait()
                continue
            job = (self._finals or self._interims).popleft()
            started = self._busy_since[worker] = self._clock()
            try:
                r = job.request
                if r.whole:
                    args = (r.pcm16, r.offset_ms, r.prompt, r.language, r.phrases)
                    result = await asyncio.to_thread(self._decoder.transcribe, *args)
                else:
                    result = await asyncio.to_thread(self._decoder.decode, r.pcm16, r.offset_ms, r.prompt, r.language)
            except Exception as e:  # noqa: BLE001 - the caller gets the error; the queue serves the others
                if not job.done.done():
                    job.done.set_exception(e)
            else:
                if not job.done.done():
                    job.done.set_result(result)
            finally:
                self.decodes += 1
                self.decode_s += self._clock() - started
                del self._busy_since[worker]
