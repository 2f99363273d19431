"""A failed voxgate call as the `APIError` LiveKit's retry logic reads: a timeout, a connection
error (retried: the server or a session slot may be back), or a status error with an HTTP-like
code (4xx: final, except 408/429/499)."""

from __future__ import annotations

import grpc
from livekit.agents import APIConnectionError, APIError, APIStatusError, APITimeoutError

from voxgate_client import error_details, format_error

_HTTP_STATUS = {
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.DATA_LOSS: 500,
    grpc.StatusCode.UNAUTHENTICATED: 401,
}
# voxgate errors after which a new session may well succeed (ErrorInfo.reason).
_RETRYABLE_REASONS = {"CAPACITY", "DRAINING", "ENGINE_UNAVAILABLE", "SESSION_NOT_FOUND", "SESSION_QUOTA"}


def api_error(err: grpc.RpcError) -> APIError:
    """A failed voxgate call as the APIError LiveKit's retry logic reads."""
    details = error_details(err)
    message = f"voxgate: {format_error(details)}"
    code = err.code()
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return APITimeoutError(message)
    if code == grpc.StatusCode.UNAVAILABLE or details.get("reason") in _RETRYABLE_REASONS:
        return APIConnectionError(message)
    return APIStatusError(message, status_code=_HTTP_STATUS.get(code, 500), body=details)
