"""Where and how a long-lived integration (LiveKit, Pipecat) reaches voxgate: what its caller
gave, else the environment ($VOXGATE_ADDRESS, $VOXGATE_TOKEN), else the defaults."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from .client import AsyncSpeechClient
from .security import ADDRESS_ENV, DEFAULT_ADDRESS, TOKEN_ENV, bearer_metadata

__all__ = ["Endpoint"]


@dataclass(frozen=True)
class Endpoint:
    address: str  # host:port
    metadata: tuple[tuple[str, str], ...] | None  # the bearer token's, sent with every call
    credentials: grpc.ChannelCredentials | None = None  # TLS; None: plaintext
    channel_options: Sequence[tuple[str, Any]] | None = None

    @classmethod
    def from_env(
        cls,
        address: str | None = None,
        token: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        channel_options: Sequence[tuple[str, Any]] | None = None,
    ) -> Endpoint:
        """`address`, else $VOXGATE_ADDRESS, else DEFAULT_ADDRESS; `token`, else $VOXGATE_TOKEN
        (`token=""`: none, whatever the environment says)."""
        token = token if token is not None else os.environ.get(TOKEN_ENV, "")
        return cls(
            address=address or os.environ.get(ADDRESS_ENV) or DEFAULT_ADDRESS,
            metadata=bearer_metadata(token) if token else None,
            credentials=credentials,
            channel_options=channel_options,
        )

    def async_client(self) -> AsyncSpeechClient:
        """A new client (one grpc.aio channel) on the running event loop's."""
        return AsyncSpeechClient(
            self.address, credentials=self.credentials, channel_options=self.channel_options
        )
