"""Reading a client's request stream at the edge: a request gRPC cannot decode is the client's error.

grpc.aio decodes each request as the handler asks for it; bytes that are not a valid
protobuf message of the method's request type (or a string field that is not UTF-8)
raise protobuf's DecodeError from the request iterator, and the iterator ends there.
Left alone it becomes UNKNOWN (first request) or kills the reading task silently
(later requests). Here it becomes INVALID_ARGUMENT / MALFORMED_REQUEST, a StreamError
like any other bad input, so the session ends with its final results and a status.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TypeVar

from google.protobuf.message import DecodeError

from . import errors

T = TypeVar("T")


async def next_request(requests: AsyncIterator[T], what: str = "a request") -> T | None:
    """The next request, None at the end of the stream; MALFORMED_REQUEST if it does not decode."""
    try:
        return await anext(requests, None)
    except DecodeError as exc:
        raise malformed(exc, what) from exc


def malformed(exc: DecodeError, what: str = "a request") -> errors.StreamError:
    # protobuf's message names the type and the flaw ("Wire format was corrupt", "bad UTF-8"); never the bytes.
    return errors.malformed_request(what, str(exc)[:200])
