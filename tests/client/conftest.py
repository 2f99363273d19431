import sys
from pathlib import Path

import pytest

# Let tests import the fake server helper next to them without a package.
sys.path.insert(0, str(Path(__file__).parent))

from fake_speech_server import FakeServer  # noqa: E402


@pytest.fixture
def fake_server():
    with FakeServer() as server:
        yield server
