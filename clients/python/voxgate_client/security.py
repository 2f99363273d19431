"""Connecting to a secured voxgate: TLS / mutual-TLS channel credentials and the bearer token.

creds = tls_credentials(ca="ca.pem")  # TLS, the server checked against ca.pem
creds = tls_credentials(ca="ca.pem", cert="client.pem", key="client.key")  # mutual TLS
with SpeechClient("speech.example:50051", credentials=creds) as client:
    client.transcribe(config, audio, metadata=bearer_metadata(token))
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

__all__ = [
    "ADDRESS_ENV",
    "DEFAULT_ADDRESS",
    "TOKEN_ENV",
    "Connection",
    "add_connection_arguments",
    "bearer_metadata",
    "connection_from_args",
    "tls_credentials",
]

DEFAULT_ADDRESS = "127.0.0.1:50051"
ADDRESS_ENV = "VOXGATE_ADDRESS"
TOKEN_ENV = "VOXGATE_TOKEN"


def tls_credentials(
    ca: str | None = None, cert: str | None = None, key: str | None = None
) -> grpc.ChannelCredentials:
    """TLS channel credentials from PEM files.

    `ca` None: the system's roots. `cert` and `key`: a client certificate (mutual TLS).
    """
    if bool(cert) != bool(key):
        raise ValueError("a client certificate and its key go together")
    return grpc.ssl_channel_credentials(
        root_certificates=Path(ca).read_bytes() if ca else None,
        private_key=Path(key).read_bytes() if key else None,
        certificate_chain=Path(cert).read_bytes() if cert else None,
    )


def bearer_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """The call metadata that carries `token` to the server."""
    return (("authorization", f"Bearer {token}"),)


@dataclass(frozen=True)
class Connection:
    """What the command-line flags ask for: channel credentials/options and per-call metadata."""

    credentials: grpc.ChannelCredentials | None
    channel_options: tuple[tuple[str, Any], ...]
    metadata: tuple[tuple[str, str], ...]

    def channel(self, target: str) -> grpc.Channel:
        options = list(self.channel_options)
        if self.credentials is None:
            return grpc.insecure_channel(target, options)
        return grpc.secure_channel(target, self.credentials, options)


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("security")
    group.add_argument(
        "--tls",
        action="store_true",
        help="connect with TLS, checking the server against the "
        "system's roots (implied by the other --tls-* flags)",
    )
    group.add_argument(
        "--tls-ca", metavar="FILE", help="PEM CA that issued the server's certificate"
    )
    group.add_argument(
        "--tls-cert", metavar="FILE", help="PEM client certificate, for mutual TLS (with --tls-key)"
    )
    group.add_argument("--tls-key", metavar="FILE", help="PEM private key of --tls-cert")
    group.add_argument(
        "--tls-server-name",
        metavar="NAME",
        help="name to expect in the server's certificate (default: the host of --server)",
    )
    group.add_argument(
        "--token",
        default=os.environ.get(TOKEN_ENV),
        metavar="TOKEN",
        help=f"bearer token sent with every call [env {TOKEN_ENV}]",
    )


def connection_from_args(args: argparse.Namespace) -> Connection:
    """Raises ValueError for flags that do not go together, OSError for unreadable files."""
    tls = args.tls or args.tls_ca or args.tls_cert or args.tls_key or args.tls_server_name
    credentials = tls_credentials(args.tls_ca, args.tls_cert, args.tls_key) if tls else None
    options = (
        (("grpc.ssl_target_name_override", args.tls_server_name),) if args.tls_server_name else ()
    )
    return Connection(credentials, options, bearer_metadata(args.token) if args.token else ())
