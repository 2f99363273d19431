"""The workers' resume tokens and the metadata a relay forwards (service/peers.py)."""

from __future__ import annotations

import socket

import pytest

from service.peers import WorkerRole, forwarded_metadata
from service.workers import reserve_port


def test_a_token_names_its_worker_and_only_another_one_is_relayed_to() -> None:
    role = WorkerRole(index=1, count=3, peer_dir="/run/x")
    assert role.token_prefix == "w1."
    assert role.owner_of("w0.abc") == 0 and role.owner_of("w2.abc-_") == 2
    assert role.owner_of("w1.abc") is None, "its own: served here"
    for token in ("", "abc", "w3.abc", "wx.abc", "w.abc", "x0.abc", "w-1.abc"):
        assert role.owner_of(token) is None, token  # unknown here: NOT_FOUND, as on one process
    assert role.socket() == role.socket(1) != role.socket(0)


def test_the_callers_credentials_travel_but_not_the_transports_headers() -> None:
    metadata = [
        ("authorization", "Bearer t"),
        ("x-goog-api-key", "k"),
        ("user-agent", "grpc-python"),
        ("grpc-accept-encoding", "gzip"),
        (":authority", "h"),
        ("x-trace-bin", b"\x01"),
    ]
    assert forwarded_metadata(metadata) == (
        ("authorization", "Bearer t"),
        ("x-goog-api-key", "k"),
        ("x-trace-bin", b"\x01"),
    )


def test_the_reserved_port_is_shared_only_with_reuseport_sockets() -> None:
    holder = reserve_port("127.0.0.1", 0)
    port = holder.getsockname()[1]
    try:
        worker = socket.socket()
        worker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        worker.bind(("127.0.0.1", port))  # a worker binds it too
        worker.close()
        with socket.socket() as other, pytest.raises(OSError):
            other.bind(("127.0.0.1", port))  # anyone else is refused
    finally:
        holder.close()
