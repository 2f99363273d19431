"""Where the framework integrations (LiveKit, Pipecat) connect: their arguments, else the
environment, else the defaults (voxgate_client.endpoint, shared by both)."""

from __future__ import annotations

import asyncio

import pytest

from tests.client.fake_speech_server import FakeServer
from voxgate_client.endpoint import Endpoint
from voxgate_client.security import DEFAULT_ADDRESS


def test_arguments_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOXGATE_ADDRESS", "env-host:1")
    monkeypatch.setenv("VOXGATE_TOKEN", "env-token")
    endpoint = Endpoint.from_env("arg-host:2", "arg-token")
    assert endpoint.address == "arg-host:2"
    assert endpoint.metadata == (("authorization", "Bearer arg-token"),)
    assert Endpoint.from_env(token="").metadata is None, "an empty token is none, whatever the env"


def test_the_environment_then_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOXGATE_ADDRESS", "env-host:1")
    monkeypatch.setenv("VOXGATE_TOKEN", "env-token")
    endpoint = Endpoint.from_env()
    assert (endpoint.address, endpoint.metadata) == ("env-host:1", (("authorization", "Bearer env-token"),))
    monkeypatch.delenv("VOXGATE_ADDRESS")
    monkeypatch.delenv("VOXGATE_TOKEN")
    assert (Endpoint.from_env().address, Endpoint.from_env().metadata) == (DEFAULT_ADDRESS, None)


def test_its_client_reaches_the_server_the_environment_names(
    fake_speech: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VOXGATE_ADDRESS", fake_speech.target)

    async def engine_name() -> str:
        client = Endpoint.from_env().async_client()
        try:
            return (await client.get_capabilities(timeout=10)).engine.name
        finally:
            await client.close()

    assert asyncio.run(engine_name()) == "fake"
