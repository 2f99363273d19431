"""Engines the sidecar can own, by name. Imported lazily: each pulls in its own stack."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine_sidecar.engines.engine import Engine

ENGINE_NAMES = ("sphinx", "fake", "voxtral")


def create_engine(name: str, model: str, max_sessions: int, options: Mapping[str, Any] | None = None) -> Engine:
    """options: engine-specific settings (voxtral: the fields of VoxtralOptions); others take none."""
    if name == "sphinx":
        from engine_sidecar.engines.sphinx import SphinxEngine

        return SphinxEngine(model=model, max_sessions=max_sessions)
    if name == "fake":
        from engine_sidecar.engines.fake import FakeEngine

        return FakeEngine(script_path=model, max_sessions=max_sessions)
    if name == "voxtral":
        from engine_sidecar.engines.voxtral.engine import VoxtralEngine

        return VoxtralEngine(model=model, max_sessions=max_sessions, options=options)
    raise ValueError(f"unknown engine {name!r}; choose one of {', '.join(ENGINE_NAMES)}")
