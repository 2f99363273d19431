"""Engines the sidecar can own, by name. Imported lazily: each pulls in its own stack."""

from __future__ import annotations

from ..engine import Engine

ENGINE_NAMES = ("sphinx", "fake")


def create_engine(name: str, model: str, max_sessions: int) -> Engine:
    if name == "sphinx":
        from .sphinx import SphinxEngine

        return SphinxEngine(model=model, max_sessions=max_sessions)
    if name == "fake":
        from .fake import FakeEngine

        return FakeEngine(script_path=model, max_sessions=max_sessions)
    raise ValueError(f"unknown engine {name!r}; choose one of {', '.join(ENGINE_NAMES)}")
