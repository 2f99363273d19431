"""Fixtures of the framework tests, shared with tests/engine/test_voxtral_integrations.py (which
imports them: the Voxtral server fixture lives under tests/engine/)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.relay import Relay

# CI (.ci/run) sets it: a missing framework fails these tests instead of skipping them.
REQUIRE = os.environ.get("VOXGATE_REQUIRE_INTEGRATIONS") == "1"


def require_livekit() -> None:
    """Import LiveKit Agents and the plugin, or skip the module (fail in CI)."""
    if REQUIRE:
        import livekit.agents  # noqa: F401
        import livekit.plugins.voxgate  # noqa: F401
    else:
        pytest.importorskip("livekit.agents", reason="livekit-agents is not installed (make install)")
        pytest.importorskip("livekit.plugins.voxgate", reason="livekit-plugins-voxgate is not installed")


@pytest.fixture(scope="session")
def pipecat_python() -> Path:
    """The Pipecat venv's interpreter (tests/integrations/venvs.py), built on first use."""
    from tests.integrations.venvs import pipecat_python as build

    try:
        return build()
    except (subprocess.CalledProcessError, OSError) as exc:
        if REQUIRE:
            raise
        pytest.skip(f"the Pipecat test venv could not be built: {exc}")


@pytest.fixture
def relay_factory() -> Iterator[type[Relay]]:
    made: list[Relay] = []

    class Made(Relay):
        def __init__(self, target: str) -> None:
            super().__init__(target)
            made.append(self)

    yield Made
    for r in made:
        r.close()
