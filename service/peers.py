"""A worker's place among `voxgate serve --workers N`, and the resume relay between workers.

Every worker serves the public port (SO_REUSEPORT: the kernel spreads connections) and also a private Unix
socket in the parent's 0700 directory. A worker's resume tokens start with `w<index>.`, so a resume that lands
on another worker is relayed, whole, to the owner's private socket: the first request and every later one go
to the owner, its responses and its final status come back, and a cancel on either side cancels the other.
The owner does everything a resume does on one process (its token, tenant and window checks included); the
relaying worker only moves messages, so nothing is lost or reordered.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
import structlog
from google.protobuf.message import DecodeError

from voxgate_client.v1 import speech_pb2 as pb
from voxgate_client.v1 import speech_pb2_grpc

from . import errors, request_stream

log = structlog.get_logger("peers")
# Call metadata a relay does not copy: the transport's own (the relay's call makes its own).
NOT_FORWARDED = frozenset({"user-agent", "content-type", "te", "host", "authority"})
STATUS_DETAILS = "grpc-status-details-bin"
# grpc.aio's status for a call whose write failed, in place of the real one (grpc/grpc#36066).
AIO_FAILED_WRITE = "Internal error from Core"


@dataclass(frozen=True)
class WorkerRole:
    index: int
    count: int
    peer_dir: str  # the parent's private directory: every worker's socket is in it

    def socket(self, index: int | None = None) -> Path:
        return Path(self.peer_dir) / f"worker-{self.index if index is None else index}.sock"

    def quota_socket(self) -> Path:
        """The parent's per-tenant session book (service/tenant_quota.py)."""
        return Path(self.peer_dir) / "quota.sock"

    @property
    def token_prefix(self) -> str:
        return f"w{self.index}."  # token_urlsafe never contains "."

    def owner_of(self, token: str) -> int | None:
        """The other worker that holds the session of `token`; None when it is this one's (or names none)."""
        head, sep, _ = token.partition(".")
        if not sep or not head.startswith("w") or not head[1:].isdigit():
            return None
        index = int(head[1:])
        return index if index != self.index and index < self.count else None


def forwarded_metadata(metadata: Sequence[tuple[str, str | bytes]] | None) -> tuple[tuple[str, str | bytes], ...]:
    """The caller's metadata (its bearer token above all: the owner authenticates the tenant again)."""
    return tuple((k, v) for k, v in metadata or () if not k.startswith((":", "grpc-")) and k not in NOT_FORWARDED)


def _trailing(exc: grpc.aio.AioRpcError) -> tuple[tuple[str, str | bytes], ...]:
    return tuple(
        (k, v) for k, v in exc.trailing_metadata() or () if k == STATUS_DETAILS or not k.startswith((":", "grpc-"))
    )


class ResumeRelay:
    """Relays a resume to the worker that owns its session (see the module docstring)."""

    def __init__(self, role: WorkerRole, max_message_bytes: int) -> None:
        self.role = role
        self._options = [("grpc.max_receive_message_length", max_message_bytes), ("grpc.use_local_subchannel_pool", 1)]
        self.active = 0  # relayed streams now
        self._idle = asyncio.Event()
        self._idle.set()

    async def idle(self) -> None:
        """Until no stream is being relayed (a drain waits for them)."""
        await self._idle.wait()

    async def relay(
        self,
        owner: int,
        first: pb.StreamingRecognizeRequest,
        requests: AsyncIterator[pb.StreamingRecognizeRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[pb.StreamingRecognizeResponse]:
        """The owner's responses; its error status, if it ends on one, is this stream's (context.abort)."""
        log.info("resume_relayed", owner=owner)
        # A channel per relay: resumes are rare, and a restarted owner must not meet a dead one's backoff.
        channel = grpc.aio.insecure_channel(f"unix:{self.role.socket(owner)}", options=self._options)
        call = speech_pb2_grpc.SpeechStub(channel).StreamingRecognize(
            metadata=forwarded_metadata(context.invocation_metadata()), timeout=context.time_remaining()
        )
        pump = asyncio.create_task(_pump(first, requests, call))
        answered = False
        failure: grpc.aio.AioRpcError | None = None
        self.active += 1
        self._idle.clear()
        try:
            try:
                while (response := await call.read()) is not grpc.aio.EOF:
                    answered = True
                    yield response
            except grpc.aio.AioRpcError as exc:
                if (bad := _decode_error(pump)) is not None:
                    raise request_stream.malformed(bad) from bad
                failure = exc
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if (bad := _decode_error(pump)) is None or (task is not None and task.cancelling()):
                    raise  # the client went away, or this task is being cancelled
                raise request_stream.malformed(bad) from bad  # the pump cancelled the call: the client's bad bytes
        finally:
            call.cancel()  # the client went away (or the owner ended): the other side hears of it
            pump.cancel()
            try:
                await asyncio.gather(pump, return_exceptions=True)
                await channel.close()
            finally:
                self.active -= 1
                if not self.active:
                    self._idle.set()
        if failure is None:
            return
        if not answered and _nobody_answered(failure):
            # Nobody answers on the owner's socket: that worker died and its sessions with it.
            raise errors.StreamError(
                grpc.StatusCode.NOT_FOUND,
                errors.SESSION_NOT_FOUND,
                "no session to resume with this token: the worker that held it is gone",
                field="config.resume_token",
            )
        await context.abort(failure.code(), failure.details() or "", trailing_metadata=_trailing(failure))


async def _pump(
    first: pb.StreamingRecognizeRequest,
    requests: AsyncIterator[pb.StreamingRecognizeRequest],
    call: grpc.aio.StreamStreamCall,
) -> None:
    """Client → owner, with flow control (each write waits for the owner to take it), then the half-close."""
    try:
        await call.write(first)
        async for request in requests:
            await call.write(request)
        await call.done_writing()
    except DecodeError:
        call.cancel()  # the reader sees the cancel and reports the malformed request
        raise
    except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
        pass  # the owner's call has ended: its status is what the client gets


def _nobody_answered(failure: grpc.aio.AioRpcError) -> bool:
    """The owner's socket did not answer: UNAVAILABLE, or the INTERNAL "Internal error from Core" that
    grpc.aio puts in its place when our first write is what failed (grpc/grpc#36066). A status the owner
    sent carries its ErrorInfo."""
    if any(k == STATUS_DETAILS for k, _ in failure.trailing_metadata() or ()):
        return False
    code = failure.code()
    return code == grpc.StatusCode.UNAVAILABLE or (
        code == grpc.StatusCode.INTERNAL and failure.details() == AIO_FAILED_WRITE
    )


def _decode_error(pump: asyncio.Task[None]) -> DecodeError | None:
    if not pump.done() or pump.cancelled():
        return None
    exc = pump.exception()
    return exc if isinstance(exc, DecodeError) else None
