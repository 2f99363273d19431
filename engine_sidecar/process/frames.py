"""The sidecar's frames socket: each connection is one engine session (engine_api/frames.py).

A session runs exactly as on the gRPC Session call (`EngineServicer.run_session`); what differs is only how
its end is told. A hang-up by the service (the connection closed without a Close, or bytes that are not
frames) is a cancel, as a cancelled call is on gRPC: the session is aborted and its slot given back.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
from collections.abc import AsyncIterator
from pathlib import Path

import structlog

from engine_api.frames import OK, READ_LIMIT_BYTES, FrameError, ended, frame, parse_input, read_frame, tune
from engine_api.v1 import engine_pb2 as pb
from engine_sidecar.process.servicer import EngineServicer, SessionEnded

log = structlog.get_logger("sidecar")
MAX_UNIX_PATH_BYTES = 107  # sun_path less its terminating NUL (Linux)
HANG_UP_CHECK_S = 0.5
HUNG_UP = select.POLLHUP | select.POLLRDHUP | select.POLLERR


class FramesServer:
    def __init__(self, servicer: EngineServicer, hang_up_check_s: float = HANG_UP_CHECK_S) -> None:
        self._servicer = servicer
        self._server: asyncio.Server | None = None
        self._sessions: set[asyncio.Task[None]] = set()
        self._hang_ups = HangUps(hang_up_check_s)

    async def start(self, path: Path) -> None:
        """Serve on `path`; ValueError when the path is too long for a Unix socket (a shorter --socket fits)."""
        if not _fresh(path):
            raise ValueError(
                f"the frames socket {path} is longer than a Unix socket path may be "
                f"({MAX_UNIX_PATH_BYTES} bytes): give the sidecar a shorter --socket"
            )
        self._server = await asyncio.start_unix_server(self._connection, path=str(path), limit=READ_LIMIT_BYTES)
        self._hang_ups.start()

    async def stop(self, grace_s: float) -> None:
        """Take no new sessions; give the running ones `grace_s` to end, then cancel them (as gRPC's stop)."""
        if self._server is not None:
            self._server.close()
        self._hang_ups.stop()
        if self._sessions:
            _, pending = await asyncio.wait(set(self._sessions), timeout=grace_s)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._sessions.add(task)
        tune(writer)
        fd = self._hang_ups.watch(writer, task)
        told = False  # the session's Ended went out
        try:
            await self._serve(reader, writer, task)
            told = True
        except (ConnectionError, asyncio.CancelledError):
            pass  # the service hung up (or the sidecar stops): run_session aborted the session on its way out
        finally:
            self._hang_ups.forget(fd)
            self._sessions.discard(task)
            if told:
                writer.close()  # after the Ended, which close() still sends
            else:
                writer.transport.abort()  # at once: a close would wait for a reader that may never read
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, task: asyncio.Task[None]
    ) -> None:
        try:
            async with contextlib.aclosing(self._servicer.run_session(_inputs(reader, task))) as outputs:
                async for out in outputs:
                    writer.write(frame(out))
                    await writer.drain()
            last = ended(OK)
        except SessionEnded as end:
            last = ended(end.code, end.details)
        except ConnectionError:
            raise
        except Exception as exc:  # what gRPC would answer UNKNOWN (the service takes it for a lost engine)
            log.exception("frames_session_error")
            last = ended("UNKNOWN", f"unexpected error: {exc!r}")
        writer.write(frame(last))
        await writer.drain()


def _fresh(path: Path) -> bool:
    """A stale socket file of an earlier run removed; False when the path cannot be a Unix socket's."""
    path.unlink(missing_ok=True)
    return len(os.fsencode(path)) <= MAX_UNIX_PATH_BYTES


async def _inputs(reader: asyncio.StreamReader, session: asyncio.Task[None]) -> AsyncIterator[pb.SessionInput]:
    """The service's messages. At a hang-up (the connection closed without a Close, or not frames) the
    session's task is cancelled, as gRPC cancels a call's handler when its client goes away."""
    closed = False
    try:
        while (body := await read_frame(reader)) is not None:
            msg = parse_input(body)
            yield msg
            if msg.WhichOneof("input") == "close":
                closed = True
                return
    except FrameError as exc:
        log.warning("frames_bad_input", error=str(exc))
    except ConnectionError:
        pass
    if not closed:
        session.cancel()


class HangUps:
    """Notices a service that hung up on a session whose input is not being read (an engine that holds its
    audio back, or froze), and cancels that session, as gRPC cancels a call whose client went away.

    A session's input is read only as the engine takes it (that is the backpressure), so the end of the
    connection may sit behind unread audio; the kernel says at once that the peer closed, whatever is queued.
    One poll over every connection each `check_s`: a few microseconds, however many sessions.
    """

    def __init__(self, check_s: float) -> None:
        self._check_s = check_s
        self._poll = select.poll()
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._sweeper: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep())

    def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()

    def watch(self, writer: asyncio.StreamWriter, task: asyncio.Task[None]) -> int:
        fd = writer.get_extra_info("socket").fileno()
        self._poll.register(fd, HUNG_UP)
        self._tasks[fd] = task
        return fd

    def forget(self, fd: int) -> None:
        """Before the socket closes (its number may be reused at once)."""
        if self._tasks.pop(fd, None) is not None:
            self._poll.unregister(fd)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(self._check_s)
            for fd, _ in self._poll.poll(0) if self._tasks else ():
                if (task := self._tasks.get(fd)) is not None:
                    self.forget(fd)  # once: a second cancel could cut short the session's abort
                    task.cancel()
