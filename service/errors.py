"""Errors sent to clients: a gRPC status plus google.rpc.ErrorInfo with a stable reason."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2

DOMAIN = "voxgate.dev"

INVALID_CONFIG = "INVALID_CONFIG"
UNSUPPORTED_AUDIO_FORMAT = "UNSUPPORTED_AUDIO_FORMAT"
INVALID_AUDIO = "INVALID_AUDIO"
AUDIO_MESSAGE_TOO_LARGE = "AUDIO_MESSAGE_TOO_LARGE"
PROTOCOL_ORDER = "PROTOCOL_ORDER"
CAPACITY = "CAPACITY"
ENGINE_UNAVAILABLE = "ENGINE_UNAVAILABLE"
DRAINING = "DRAINING"
ENGINE_ERROR = "ENGINE_ERROR"
SESSION_NOT_FOUND = "SESSION_NOT_FOUND"
SESSION_ATTACHED = "SESSION_ATTACHED"
TOKEN_MISSING = "TOKEN_MISSING"
TOKEN_INVALID = "TOKEN_INVALID"
API_NOT_ALLOWED = "API_NOT_ALLOWED"
SESSION_QUOTA = "SESSION_QUOTA"
MALFORMED_REQUEST = "MALFORMED_REQUEST"
INTERNAL_ERROR = "INTERNAL_ERROR"


@dataclass(frozen=True)
class StreamError(Exception):
    code: grpc.StatusCode
    reason: str
    message: str
    field: str = ""
    retry_delay_s: float = 0.0
    info: Mapping[str, str] = dataclasses.field(default_factory=dict, compare=False)  # more ErrorInfo.metadata
    quota_subject: str = ""  # set: a google.rpc.QuotaFailure names this subject (e.g. "tenant:acme")

    def __str__(self) -> str:
        return f"{self.code.name} {self.reason}: {self.message}"

    def trailing_metadata(self) -> tuple[tuple[str, bytes], ...]:
        details = [
            error_details_pb2.ErrorInfo(
                reason=self.reason,
                domain=DOMAIN,
                metadata={**self.info, **({"field": self.field} if self.field else {})},
            )
        ]
        extra: list[Message] = []
        if self.field:
            extra.append(
                error_details_pb2.BadRequest(
                    field_violations=[
                        error_details_pb2.BadRequest.FieldViolation(field=self.field, description=self.message)
                    ]
                )
            )
        if self.retry_delay_s:
            extra.append(
                error_details_pb2.RetryInfo(
                    retry_delay=duration_pb2.Duration(
                        seconds=int(self.retry_delay_s), nanos=int(self.retry_delay_s % 1 * 1e9)
                    )
                )
            )
        if self.quota_subject:
            extra.append(
                error_details_pb2.QuotaFailure(
                    violations=[
                        error_details_pb2.QuotaFailure.Violation(subject=self.quota_subject, description=self.message)
                    ]
                )
            )
        packed = []
        for msg in [*details, *extra]:
            any_msg = any_pb2.Any()
            any_msg.Pack(msg)
            packed.append(any_msg)
        status = status_pb2.Status(code=self.code.value[0], message=self.message, details=packed)
        return (("grpc-status-details-bin", status.SerializeToString()),)


def invalid_config(field: str, message: str) -> StreamError:
    return StreamError(grpc.StatusCode.INVALID_ARGUMENT, INVALID_CONFIG, message, field=field)


def unsupported_format(field: str, message: str) -> StreamError:
    return StreamError(grpc.StatusCode.INVALID_ARGUMENT, UNSUPPORTED_AUDIO_FORMAT, message, field=field)


def protocol_order(message: str) -> StreamError:
    return StreamError(grpc.StatusCode.FAILED_PRECONDITION, PROTOCOL_ORDER, message)


def malformed_request(what: str, detail: str) -> StreamError:
    """A request that is not valid protobuf for its type (or has a string field that is not UTF-8)."""
    return StreamError(
        grpc.StatusCode.INVALID_ARGUMENT,
        MALFORMED_REQUEST,
        f"{what} could not be decoded: not a valid protobuf message of the method's request type, "
        f"or a string field that is not UTF-8 ({detail})",
    )


def internal(message: str) -> StreamError:
    return StreamError(grpc.StatusCode.INTERNAL, INTERNAL_ERROR, message)


def unavailable(reason: str, message: str, retry_delay_s: float) -> StreamError:
    return StreamError(grpc.StatusCode.UNAVAILABLE, reason, message, retry_delay_s=retry_delay_s)


def session_quota(tenant: str, limit: int) -> StreamError:
    return StreamError(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        SESSION_QUOTA,
        f"tenant {tenant!r} already has its {limit} concurrent session(s)",
        info={"tenant": tenant, "limit": str(limit)},
        quota_subject=f"tenant:{tenant}",
    )
