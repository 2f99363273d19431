"""The planner's view of the engine presets: the preset table (../presets.py, which the engine expands)
and the window topologies `voxgate plan` compares."""

from __future__ import annotations

from dataclasses import dataclass

from engine_sidecar.engines.voxtral.presets import PRESET_16GB, PRESET_DATACENTER, PRESETS, EnginePreset, get_preset

__all__ = [
    "PRESETS",
    "PRESET_16GB",
    "PRESET_DATACENTER",
    "WINDOW_CHOICES",
    "EnginePreset",
    "WindowChoice",
    "get_preset",
]


@dataclass(frozen=True)
class WindowChoice:
    decoder: int | None  # None: the checkpoint's own window
    encoder: int | None
    label: str


# Printed by `voxgate plan`: stock, and the two narrowed topologies of the published LinTO measurements.
WINDOW_CHOICES = (
    WindowChoice(None, None, "stock"),
    WindowChoice(1024, 512, "1024/512"),
    WindowChoice(512, 256, "512/256"),
)
