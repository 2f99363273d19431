from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import ServerProcess, start_server


@pytest.fixture(scope="module")
def sphinx_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_server(tmp_path_factory.mktemp("sphinx"), engine="sphinx")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def fake_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_server(tmp_path_factory.mktemp("fake"), engine="fake")
    yield server
    server.stop()


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path
