"""Engine flags on `voxgate serve` (vLLM's names where one exists) → the sidecar's engine options.

Precedence: an explicit flag > the named --preset > the engine's defaults. The
result travels to the sidecar as JSON (`voxgate sidecar --engine-options`), so
the service itself never imports vLLM.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from engine_api.presets import PRESETS, get_preset

# flag → (engine option, type, help)
ENGINE_FLAGS: dict[str, tuple[str, type, str]] = {
    "--max-model-len": ("max_model_len", int, "position budget per engine request (80 ms of audio per token)"),
    "--max-num-seqs": ("max_num_seqs", int, "concurrent engine requests (= sessions the engine admits)"),
    "--max-num-batched-tokens": ("max_num_batched_tokens", int, "tokens per engine step (≥ 400 × streams)"),
    "--decoder-window": ("decoder_sliding_window", int, "decoder sliding window (hf_overrides text_config)"),
    "--encoder-window": ("encoder_sliding_window", int, "encoder sliding window (hf_overrides audio_config)"),
    "--gpu-memory-utilization": ("gpu_memory_utilization", float, "fraction of GPU memory vLLM may use"),
    "--kv-cache-dtype": ("kv_cache_dtype", str, "KV-cache dtype (auto; fp8 is refused by re-anchoring)"),
    "--dtype": ("dtype", str, "model dtype (auto, bfloat16, float32)"),
    "--cudagraph-mode": ("cudagraph_mode", str, "CUDA graph mode (PIECEWISE; FULL is rejected by the model)"),
    "--tensor-parallel-size": ("tensor_parallel_size", int, "GPUs per engine"),
    "--block-size": ("block_size", int, "KV-cache block size"),
    "--reanchor-margin-tokens": ("reanchor_margin_tokens", int,
                                 "re-anchor once a session's clock reaches max_model_len minus this (default 128)"),
}


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("engine (voxtral)")
    group.add_argument("--preset", choices=sorted(PRESETS), help="named engine settings: " + "; ".join(
        f"{p.name}: {p.description}" for p in PRESETS.values()))
    for flag, (_, kind, help_text) in ENGINE_FLAGS.items():
        group.add_argument(flag, type=kind, default=None, help=help_text)
    group.add_argument("--enable-prefix-caching", action="store_true", default=None,
                       help="(refused for realtime: live sessions share no prefix)")
    group.add_argument("--no-reanchor", dest="reanchor", action="store_false", default=None,
                       help="turn RoPE re-anchoring off: sessions roll over to fresh engine requests near "
                            "max_model_len instead (a seam in the model's context)")
    group.add_argument("--engine-option", action="append", default=[], metavar="KEY=VALUE",
                       help="any other engine option (JSON value), e.g. rut_blank_frames=300; repeatable")


def _preset_options(name: str) -> dict[str, Any]:
    p = get_preset(name)
    options: dict[str, Any] = {
        "max_model_len": p.max_model_len, "max_num_seqs": p.max_num_seqs,
        "max_num_batched_tokens": p.max_num_batched_tokens, "gpu_memory_utilization": p.gpu_memory_utilization,
        "kv_cache_dtype": p.kv_cache_dtype, "cudagraph_mode": p.cudagraph_mode,
        "enable_prefix_caching": p.enable_prefix_caching, "tensor_parallel_size": p.tensor_parallel_size,
    }
    if p.decoder_window is not None:
        options["decoder_sliding_window"] = p.decoder_window
    if p.encoder_window is not None:
        options["encoder_sliding_window"] = p.encoder_window
    return options


def preset_env(name: str | None) -> dict[str, str]:
    return dict(get_preset(name).env) if name else {}


def engine_options(args: argparse.Namespace, base_json: str = "") -> dict[str, Any]:
    options: dict[str, Any] = json.loads(base_json) if base_json else {}
    if args.preset:
        options.update(_preset_options(args.preset))
    for flag, (name, _, _) in ENGINE_FLAGS.items():
        value = getattr(args, flag.lstrip("-").replace("-", "_"))
        if value is not None:
            options[name] = value
    if args.enable_prefix_caching:
        options["enable_prefix_caching"] = True
    if args.reanchor is False:
        options["reanchor"] = False
    for item in args.engine_option:
        key, sep, raw = item.partition("=")
        if not sep:
            raise SystemExit(f"voxgate serve: --engine-option wants KEY=VALUE, got {item!r}")
        try:
            options[key] = json.loads(raw)
        except json.JSONDecodeError:
            options[key] = raw
    return options
