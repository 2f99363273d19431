"""The Voxtral engine's flags (vLLM's names where one exists), and the one place they become VoxtralOptions.

`voxgate serve` offers the same flags and passes what was given on to its sidecar unread: `--preset NAME`
and one `--engine-option KEY=VALUE` per setting (`option_items`). The sidecar reads them once, here:
the preset's settings, then the named flags, then `--engine-option` items, each later one winning.
Every flag also reads `VOXGATE_<NAME>` from the environment, as the service's own flags do.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any

from engine_sidecar.engines.voxtral.options import VoxtralOptions
from engine_sidecar.engines.voxtral.presets import PRESETS, get_preset

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
    "--reanchor-margin-tokens": (
        "reanchor_margin_tokens",
        int,
        "re-anchor once a session's clock reaches max_model_len minus this "
        f"(engine default {VoxtralOptions.reanchor_margin_tokens})",
    ),
}
ON = ("1", "true", "yes", "on")


def env_name(flag: str) -> str:
    return "VOXGATE_" + flag.lstrip("-").replace("-", "_").upper()


def add_engine_arguments(parser: argparse.ArgumentParser, environ: Mapping[str, str] = os.environ) -> None:
    group = parser.add_argument_group("engine (voxtral)")
    presets = "; ".join(f"{p.name}: {p.description}" for p in PRESETS.values())
    group.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default=environ.get(env_name("--preset")) or None,
        help=f"named engine settings: {presets} [env {env_name('--preset')}]",
    )
    for flag, (_, kind, help_text) in ENGINE_FLAGS.items():
        raw = environ.get(env_name(flag))
        group.add_argument(
            flag, type=kind, default=kind(raw) if raw else None, help=f"{help_text} [env {env_name(flag)}]"
        )
    group.add_argument(
        "--enable-prefix-caching",
        action="store_true",
        default=environ.get(env_name("--enable-prefix-caching"), "").lower() in ON or None,
        help=f"(refused for realtime: live sessions share no prefix) [env {env_name('--enable-prefix-caching')}]",
    )
    group.add_argument(
        "--no-reanchor",
        dest="reanchor",
        action="store_false",
        default=False if environ.get(env_name("--no-reanchor"), "").lower() in ON else None,
        help="turn RoPE re-anchoring off: sessions roll over to fresh engine requests near "
        "max_model_len instead (a seam in the model's context) "
        f"[env {env_name('--no-reanchor')}]",
    )
    group.add_argument(
        "--engine-option",
        action="append",
        metavar="KEY=VALUE",
        default=environ.get(env_name("--engine-option"), "").split(),
        help="any other engine option (a JSON value, else a string), e.g. rut_blank_frames=300; "
        f"repeatable [env {env_name('--engine-option')}: space-separated]",
    )


def option_items(args: argparse.Namespace) -> tuple[str, ...]:
    """The engine settings given as flags, as KEY=VALUE items (`--engine-option` ones last), for a sidecar."""
    items = [
        f"{name}={json.dumps(value)}"
        for flag, (name, _, _) in ENGINE_FLAGS.items()
        if (value := getattr(args, flag.lstrip("-").replace("-", "_"))) is not None
    ]
    if args.enable_prefix_caching:
        items.append("enable_prefix_caching=true")
    if args.reanchor is False:
        items.append("reanchor=false")
    return (*items, *args.engine_option)


def parse_items(items: Iterable[str]) -> dict[str, Any]:
    """KEY=VALUE items: the value as JSON where it parses (numbers, true, null, objects), else the string."""
    options: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--engine-option wants KEY=VALUE, got {item!r}")
        try:
            options[key] = json.loads(raw)
        except json.JSONDecodeError:
            options[key] = raw
    return options


def preset_options(name: str) -> dict[str, Any]:
    """A preset's settings as engine options."""
    p = get_preset(name)
    options: dict[str, Any] = {
        "max_model_len": p.max_model_len,
        "max_num_seqs": p.max_num_seqs,
        "max_num_batched_tokens": p.max_num_batched_tokens,
        "gpu_memory_utilization": p.gpu_memory_utilization,
        "kv_cache_dtype": p.kv_cache_dtype,
        "cudagraph_mode": p.cudagraph_mode,
        "enable_prefix_caching": p.enable_prefix_caching,
        "tensor_parallel_size": p.tensor_parallel_size,
    }
    if p.decoder_window is not None:
        options["decoder_sliding_window"] = p.decoder_window
    if p.encoder_window is not None:
        options["encoder_sliding_window"] = p.encoder_window
    return options


def voxtral_options(args: argparse.Namespace) -> VoxtralOptions:
    """The engine's options from a sidecar's (or `voxgate serve`'s) parsed flags: preset < flags < items."""
    base = preset_options(args.preset) if args.preset else {}
    return VoxtralOptions.from_mapping({**base, **parse_items(option_items(args))})


def given(args: argparse.Namespace) -> bool:
    """Whether any engine setting was given (an engine other than voxtral takes none)."""
    return bool(args.preset or option_items(args))


def apply_preset_env(args: argparse.Namespace, environ: MutableMapping[str, str] = os.environ) -> None:
    """The preset's environment (e.g. PYTORCH_CUDA_ALLOC_CONF) for this process and the vLLM ones it starts;
    a value already set wins."""
    if args.preset:
        for key, value in get_preset(args.preset).env:
            environ.setdefault(key, value)
