"""The framework integrations import voxgate only through its Python client's public API."""

from __future__ import annotations

import pytest

from tests.helpers import ROOT, imported_modules

PACKAGES = {
    "livekit-plugins-voxgate": ROOT / "clients" / "livekit-plugins-voxgate" / "livekit" / "plugins" / "voxgate",
    "pipecat-voxgate": ROOT / "clients" / "pipecat-voxgate" / "pipecat_voxgate",
}
VOXGATE_INTERNALS = {"service", "engine_sidecar", "engine_api", "tests", "bench", "scripts"}


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_the_integration_imports_only_the_python_client(package: str) -> None:
    modules = sorted(PACKAGES[package].rglob("*.py"))
    assert modules
    names = {name for module in modules for name in imported_modules(module)}
    assert not {n for n in names if n.split(".")[0] in VOXGATE_INTERNALS}, "no part of the server"
    assert not {n for n in names if n.startswith("voxgate_client._")}, "only the client's public modules"
    assert "voxgate_client" in names
