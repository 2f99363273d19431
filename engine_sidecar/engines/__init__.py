"""Engines the sidecar can own, by name. Imported lazily: each pulls in its own stack."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..engine import Engine

ENGINE_NAMES = ("sphinx", "fake", "voxtral")


def create_engine(name: str, model: str, max_sessions: int, options: Mapping[str, Any] | None = None) -> Engine:
    """options: engine-specific settings (voxtral: the fields of VoxtralOptions); others take none."""
    if name == "sphinx":
        from .sphinx import SphinxEngine

        return SphinxEngine(model=model, max_sessions=max_sessions)
    if name == "fake":
        from .fake import FakeEngine

        return FakeEngine(script_path=model, max_sessions=max_sessions)
    if name == "voxtral":
        from .voxtral_engine import VoxtralEngine

        return VoxtralEngine(model=model, max_sessions=max_sessions, options=options)
    raise ValueError(f"unknown engine {name!r}; choose one of {', '.join(ENGINE_NAMES)}")
