"""The frames transport: one engine session per connection to the sidecar's frames socket.

The same SessionInput / SessionOutput messages as the gRPC Session call, each preceded by its length
(4 bytes, little-endian); the sidecar's last message is an `Ended` with the status the call would have
ended with. Why a second transport: between two processes of one host, a grpc.aio write costs about as
much as everything else the service does for an 80 ms chunk (a completion round trip through gRPC's
threads per message, on both sides); a write here is one `send` on the socket. Session streams only:
status, health and everything else stay on gRPC.

Both sides bound what is in flight as the gRPC channel's fixed HTTP/2 window does (a couple of seconds
of audio per session): small socket buffers, a small read buffer and a small write high-water mark, so
an engine that falls behind holds the service back and the service's backpressure reaches the client.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from pathlib import Path

from google.protobuf.message import DecodeError, Message

from ._proto import engine_pb2 as pb

HEADER = struct.Struct("<I")
# Largest message either side accepts: an 80 ms chunk is 2.5 KiB and the service's largest audio message
# is 64 KiB; a Revision of a long utterance stays far below this.
MAX_FRAME_BYTES = 1 << 20
SOCKET_BUFFER_BYTES = 16384  # the kernel doubles it: ~32 KiB (~1 s of 16 kHz PCM16) queued per direction
READ_LIMIT_BYTES = 16384  # asyncio's reader stops reading at twice this
WRITE_HIGH_WATER_BYTES = 16384
# What one session's stream holds in one direction at most: the writer's transport buffer, the socket's (the
# kernel doubles SO_SNDBUF; a Unix socket has no receive buffer of its own) and the reader's (twice its limit).
IN_FLIGHT_BYTES = WRITE_HIGH_WATER_BYTES + 2 * SOCKET_BUFFER_BYTES + 2 * READ_LIMIT_BYTES
SUFFIX = ".frames"
OK = "OK"


class FrameError(Exception):
    """The peer sent something that is not a frame (too large, cut short, or not the message it must be)."""


def frames_socket(grpc_socket: Path) -> Path:
    """Where a sidecar serving gRPC on `grpc_socket` serves frames: next to it."""
    return grpc_socket.with_name(grpc_socket.name + SUFFIX)


def tune(writer: asyncio.StreamWriter) -> None:
    """Small buffers on a new connection (either side): see the module's docstring."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        # The sender's buffer is what bounds a Unix stream socket (it has no receive buffer of its own).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER_BYTES)
    writer.transport.set_write_buffer_limits(high=WRITE_HIGH_WATER_BYTES)


def frame(msg: Message) -> bytes:
    body = msg.SerializeToString()
    return HEADER.pack(len(body)) + body


async def read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """The next frame's body; None when the peer closed between frames. FrameError for anything else."""
    try:
        head = await reader.readexactly(HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise FrameError("connection closed inside a frame header") from None
        return None
    (size,) = HEADER.unpack(head)
    if size > MAX_FRAME_BYTES:
        raise FrameError(f"frame of {size} bytes (at most {MAX_FRAME_BYTES})")
    try:
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        raise FrameError("connection closed inside a frame") from None


def parse_input(body: bytes) -> pb.SessionInput:
    try:
        return pb.SessionInput.FromString(body)
    except DecodeError as exc:
        raise FrameError(f"not a SessionInput: {exc}") from None


def parse_output(body: bytes) -> pb.SessionOutput:
    try:
        return pb.SessionOutput.FromString(body)
    except DecodeError as exc:
        raise FrameError(f"not a SessionOutput: {exc}") from None


def ended(code: str, details: str = "") -> pb.SessionOutput:
    return pb.SessionOutput(ended=pb.Ended(code=code, details=details))
