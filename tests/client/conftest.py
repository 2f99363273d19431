from collections.abc import Iterator

import pytest

from tests.client.fake_speech_server import FakeServer


@pytest.fixture
def fake_speech() -> Iterator[FakeServer]:
    """An in-process fake Speech service (the real server is not needed here)."""
    with FakeServer() as server:
        yield server
