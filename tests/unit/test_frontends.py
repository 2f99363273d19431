"""Several front ends per engine core: where each serves, and each one's share of the core's capacity."""

from __future__ import annotations

import pytest

from engine_api.frontends import FRONTEND_INDEX, FRONTENDS, frontend_of
from engine_sidecar.engines.voxtral.frontend_client import FrontEndClient, frontend_socket, frontend_sockets
from engine_sidecar.engines.voxtral.options import VoxtralOptions


def client(index: int, count: int, slot: int | None = None) -> FrontEndClient:
    return FrontEndClient(index=index, count=count, slot=index if slot is None else slot, slots=count + 4, addresses={})


def test_front_end_0_keeps_the_sidecars_socket_and_the_others_get_a_suffix() -> None:
    assert frontend_sockets("/run/voxgate/engine.sock", 3) == (
        "/run/voxgate/engine.sock",
        "/run/voxgate/engine.sock.1",
        "/run/voxgate/engine.sock.2",
    )
    assert frontend_sockets("/s", 1) == ("/s",)
    with pytest.raises(ValueError):
        frontend_socket("/s", -1)


def test_shares_of_the_cores_capacity_add_up_exactly_and_never_exceed_it() -> None:
    for capacity in range(0, 20):
        for k in range(1, 6):
            shares = [client(i, k).share(capacity) for i in range(k)]
            assert sum(shares) == capacity and max(shares) - min(shares) <= 1


def test_a_front_end_says_which_it_is_and_a_replacement_has_its_own_request_prefix() -> None:
    c = client(1, 2)
    assert frontend_of(c.counters()) == (1, 2)
    assert frontend_of({}) == (0, 1)
    assert c.counters()[FRONTEND_INDEX] == 1 and c.counters()[FRONTENDS] == 2
    assert client(1, 2, slot=3).request_prefix != c.request_prefix


def test_frontends_option_is_checked() -> None:
    assert VoxtralOptions.from_mapping({"frontends": 2}).frontends == 2
    with pytest.raises(ValueError):
        VoxtralOptions.from_mapping({"frontends": 0})
    with pytest.raises(ValueError):
        VoxtralOptions.from_mapping({"frontends": 5, "max_num_seqs": 4})
