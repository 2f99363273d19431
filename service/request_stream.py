"""Reading a client's request stream at the edge: a request gRPC cannot decode is the client's error.

grpc.aio decodes each request as the handler asks for it; bytes that are not a valid
protobuf message of the method's request type (or a string field that is not UTF-8)
raise protobuf's DecodeError from the request iterator, and the iterator ends there.
Left alone it becomes UNKNOWN (first request) or kills the reading task silently
(later requests). Here it becomes INVALID_ARGUMENT / MALFORMED_REQUEST, a StreamError
like any other bad input, so the session ends with its final results and a status.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
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


class MalformedUnaryRequests(grpc.aio.ServerInterceptor):
    """A unary request gRPC cannot decode (Google/Riva `Recognize`, `GetCapabilities`) gets MALFORMED_REQUEST too.

    gRPC decodes a unary request before any handler runs and answers UNKNOWN when that fails; this wraps the
    method's deserializer so a DecodeError reaches the handler as a value, which it answers with the status.
    Streaming methods read through `next_request` instead and are left as they are.
    """

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(details)
        if handler is None or handler.unary_unary is None or handler.request_deserializer is None:
            return handler
        decode, behavior = handler.request_deserializer, handler.unary_unary

        def deserialize(data: bytes) -> Any:
            try:
                return decode(data)
            except DecodeError as exc:
                return _Undecodable(exc)

        async def checked(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if isinstance(request, _Undecodable):
                error = malformed(request.error, "the request")
                await context.abort(error.code, error.message, trailing_metadata=error.trailing_metadata())
            return await behavior(request, context)

        return grpc.unary_unary_rpc_method_handler(
            checked, request_deserializer=deserialize, response_serializer=handler.response_serializer
        )


class _Undecodable:
    def __init__(self, error: DecodeError) -> None:
        self.error = error
