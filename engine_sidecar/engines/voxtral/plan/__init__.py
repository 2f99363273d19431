"""Engine presets and the `voxgate plan` capacity planner for Voxtral realtime on vLLM.

Pure Python: no torch, no vLLM, no GPU. `params` reads a checkpoint's dimensions, `presets` holds the named
engine settings, `capacity` does the KV arithmetic, `cli` is `voxgate plan`.
"""

from engine_sidecar.engines.voxtral.plan.capacity import (
    Budget,
    KVGroup,
    StreamKV,
    kv_groups,
    max_streams,
    parse_size,
    stream_kv,
)
from engine_sidecar.engines.voxtral.plan.params import (
    HUB_ID,
    VOXTRAL_MINI_4B_REALTIME,
    ParamsError,
    VoxtralParams,
    load_params,
    parse_params,
)
from engine_sidecar.engines.voxtral.plan.presets import PRESETS, EnginePreset, WindowChoice, get_preset

__all__ = [
    "HUB_ID",
    "PRESETS",
    "VOXTRAL_MINI_4B_REALTIME",
    "Budget",
    "EnginePreset",
    "KVGroup",
    "ParamsError",
    "StreamKV",
    "VoxtralParams",
    "WindowChoice",
    "get_preset",
    "kv_groups",
    "load_params",
    "max_streams",
    "parse_params",
    "parse_size",
    "stream_kv",
]
