"""Engines the sidecar can own, by name. Imported lazily: each pulls in its own stack."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from engine_sidecar.engines.engine import Engine

if TYPE_CHECKING:
    from engine_sidecar.engines.voxtral.options import VoxtralOptions

ENGINE_NAMES = ("whisper", "sphinx", "fake", "voxtral")


def engine_options(args: argparse.Namespace) -> VoxtralOptions | None:
    """The engine's options from the sidecar's flags, typed once, here (ValueError when they are wrong):
    voxtral's from `--preset`, its named flags and `--engine-option` items; the others take none."""
    if args.engine == "voxtral":
        from engine_sidecar.engines.voxtral.flags import voxtral_options

        return voxtral_options(args)
    from engine_sidecar.engines.voxtral.flags import given

    if given(args):
        raise ValueError(
            f"the {args.engine} engine takes no engine options (--preset, --engine-option, the voxtral flags)"
        )
    return None


def create_engine(name: str, model: str, max_sessions: int, options: VoxtralOptions | None = None) -> Engine:
    """options: the voxtral engine's (engine_options); the other engines take none."""
    if name == "whisper":
        from engine_sidecar.engines.whisper.engine import WhisperEngine

        return WhisperEngine(model=model, max_sessions=max_sessions)
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
