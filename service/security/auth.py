"""Per-RPC authentication: a bearer token in the metadata names the tenant.

A grpc.aio server interceptor checks every RPC except health and reflection
(load balancers and operators probe those without credentials):

- no token: UNAUTHENTICATED / TOKEN_MISSING; an unknown token: UNAUTHENTICATED / TOKEN_INVALID;
- a tenant calling an API it is not allowed (voxgate, riva, google): PERMISSION_DENIED / API_NOT_ALLOWED;
- otherwise the handler runs with the tenant in `current_tenant()` and `tenant` bound into
  structlog's contextvars, so every log line of the RPC (and of its session) names it.

The token is read from `authorization: Bearer <token>`, or from `x-goog-api-key: <token>`
(what Google client libraries send for an API key).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from typing import Any

import grpc
import structlog

from .. import errors
from .tokens import Tenant, TokenBook

log = structlog.get_logger("auth")

# Full gRPC service name → the API name tenants are allowed by (tokens.APIS).
API_OF_SERVICE = {
    "voxgate.v1.Speech": "voxgate",
    "nvidia.riva.asr.RivaSpeechRecognition": "riva",
    "google.cloud.speech.v1.Speech": "google",
}
OPEN_SERVICES = frozenset(
    {
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
        "grpc.reflection.v1.ServerReflection",
    }
)

_tenant: ContextVar[Tenant | None] = ContextVar("voxgate_tenant", default=None)


def current_tenant() -> Tenant | None:
    """The tenant of the RPC being handled; None when authentication is off."""
    return _tenant.get()


def bearer_token(metadata: Any) -> str | None:
    for key, value in metadata or ():
        if isinstance(value, bytes):
            continue
        if key == "authorization":
            scheme, _, token = value.strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
        elif key == "x-goog-api-key" and value.strip():
            return value.strip()
    return None


def authenticate(book: TokenBook, service: str, metadata: Any) -> Tenant:
    """The tenant the call's token names, allowed to call `service`; else StreamError."""
    token = bearer_token(metadata)
    if token is None:
        raise errors.StreamError(
            grpc.StatusCode.UNAUTHENTICATED,
            errors.TOKEN_MISSING,
            "a bearer token is required: send metadata 'authorization: Bearer <token>'",
        )
    tenant = book.lookup(token)
    if tenant is None:
        raise errors.StreamError(grpc.StatusCode.UNAUTHENTICATED, errors.TOKEN_INVALID, "the bearer token is not valid")
    api = API_OF_SERVICE.get(service)
    if api is not None and api not in tenant.apis:
        raise errors.StreamError(
            grpc.StatusCode.PERMISSION_DENIED,
            errors.API_NOT_ALLOWED,
            f"tenant {tenant.name!r} may not use the {api} API",
            info={"api": api},
        )
    return tenant


class AuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, book: Callable[[], TokenBook]) -> None:
        self._book = book  # the current book (SIGHUP may replace it)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method = handler_call_details.method  # "/package.Service/Method"
        service = method.lstrip("/").split("/", 1)[0]
        handler = await continuation(handler_call_details)
        if service in OPEN_SERVICES or handler is None:
            return handler
        try:
            tenant = authenticate(self._book(), service, handler_call_details.invocation_metadata)
        except errors.StreamError as exc:
            log.info("auth_rejected", method=method, code=exc.code.name, reason=exc.reason)
            return _rejecting(handler, exc)
        return _with_tenant(handler, tenant)


def _replace(handler: grpc.RpcMethodHandler, behavior: Callable[..., Any]) -> grpc.RpcMethodHandler:
    make = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }[(handler.request_streaming, handler.response_streaming)]
    return make(
        behavior, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
    )


def _behavior(handler: grpc.RpcMethodHandler) -> Callable[..., Any]:
    return handler.unary_unary or handler.unary_stream or handler.stream_unary or handler.stream_stream


def _rejecting(handler: grpc.RpcMethodHandler, exc: errors.StreamError) -> grpc.RpcMethodHandler:
    async def reject(request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(exc.code, exc.message, trailing_metadata=exc.trailing_metadata())

    return _replace(handler, reject)


def _enter(tenant: Tenant) -> None:
    _tenant.set(tenant)
    structlog.contextvars.bind_contextvars(tenant=tenant.name)


def _with_tenant(handler: grpc.RpcMethodHandler, tenant: Tenant) -> grpc.RpcMethodHandler:
    """The same handler, run with the tenant set (the RPC runs in its own task: nothing leaks out)."""
    behavior = _behavior(handler)
    if inspect.isasyncgenfunction(behavior):

        async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            _enter(tenant)
            responses = behavior(request, context)
            try:
                async for response in responses:
                    yield response
            finally:
                await responses.aclose()  # now, in this task: the servicer's own clean-up runs here

        return _replace(handler, stream)

    async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
        _enter(tenant)
        return await behavior(request, context)

    return _replace(handler, call)
