"""`voxgate plan`: KV memory per stream and the streams a GPU admits, per preset and window choice.

voxgate plan --gpu-memory 16GiB                       # built-in Voxtral-Mini-4B-Realtime dimensions
voxgate plan --model ./ckpt --gpu-memory 24576MiB --preset 16gb --json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine_sidecar.engines.voxtral.plan.capacity import (
    DEFAULT_BLOCK_SIZE,
    Budget,
    format_size,
    kv_groups,
    parse_size,
    stream_kv,
    weight_bytes_estimate,
)
from engine_sidecar.engines.voxtral.plan.cpu import (
    FRONT_END_MC_PER_STREAM,
    SERVICE_MC_PER_STREAM,
    CpuPlan,
    cpu_plan,
    render_cpu,
)
from engine_sidecar.engines.voxtral.plan.params import (
    HUB_ID,
    VOXTRAL_MINI_4B_REALTIME,
    ParamsError,
    VoxtralParams,
    dtype_bytes,
    load_params,
)
from engine_sidecar.engines.voxtral.plan.presets import PRESETS, WINDOW_CHOICES, EnginePreset, WindowChoice, get_preset

DECODER_BREAK_POINT = 256  # LinTO: a decoder window of 256 is where transcripts break
REANCHOR_MARGIN = 4096  # the RFC's default re-anchor margin (tokens below max_model_len)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class Model:
    params: VoxtralParams
    name: str  # what to pass as --model
    source: str  # where the dimensions came from
    weight_bytes: int
    weight_source: str


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        metavar="DIR|ID",
        default=None,
        help=f"checkpoint directory (reads DIR/params.json) or hub id; default: built-in {HUB_ID}",
    )
    parser.add_argument(
        "--gpu-memory",
        metavar="SIZE",
        required=True,
        type=_size,
        help="GPU memory, e.g. 16GiB, 16GB, 80G, 24576MiB (GB = GiB: cards are sold in binary units)",
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default=None, help="only this preset (default: all)")
    parser.add_argument(
        "--window",
        metavar="DEC/ENC",
        action="append",
        type=_window,
        default=None,
        help="window choice to evaluate (repeatable; default: stock, 1024/512, 512/256)",
    )
    parser.add_argument(
        "--block-size",
        type=int,
        default=DEFAULT_BLOCK_SIZE,
        help=f"vLLM KV block size in tokens (default {DEFAULT_BLOCK_SIZE}, vLLM's CUDA default)",
    )
    parser.add_argument("--max-model-len", type=int, default=None, help="override the preset's max_model_len")
    parser.add_argument(
        "--reserve",
        metavar="SIZE",
        type=_size,
        default=None,
        help="non-KV, non-weight GPU memory: CUDA context, activations, CUDA graphs (default: the preset's estimate)",
    )
    parser.add_argument(
        "--weights",
        metavar="SIZE",
        type=_size,
        default=None,
        help="weight memory (default: checkpoint file size, or an estimate from params)",
    )
    parser.add_argument(
        "--tokens-per-step",
        type=int,
        default=1,
        help="decoder tokens a stream schedules per step (realtime: 1 per 80 ms)",
    )
    parser.add_argument(
        "--cpu-cores",
        type=int,
        default=os.cpu_count() or 1,
        help="CPU cores of the box, for the CPU ceiling next to GPU memory's (default: this box's)",
    )
    parser.add_argument("--gpus", type=int, default=1, help="GPUs of the box, one engine each (default 1)")
    parser.add_argument(
        "--front-end-mc",
        type=int,
        default=FRONT_END_MC_PER_STREAM,
        help="CPU per stream in a sidecar front end, millicores (default: measured here, "
        "docs/benchmarks.md; give your box's own from bench/gpu_recipe.sh)",
    )
    parser.add_argument(
        "--service-mc",
        type=int,
        default=SERVICE_MC_PER_STREAM,
        help="CPU per stream in a service worker, millicores (default: measured here)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _window(text: str) -> WindowChoice:
    dec, sep, enc = text.partition("/")
    if not sep or not dec.isdigit() or not enc.isdigit() or int(dec) <= 0 or int(enc) <= 0:
        raise argparse.ArgumentTypeError(f"window must be DECODER/ENCODER tokens, e.g. 512/256: {text!r}")
    return WindowChoice(int(dec), int(enc), f"{int(dec)}/{int(enc)}")


def resolve_model(model: str | None) -> Model:
    if model is None:
        return _builtin(HUB_ID)
    path = Path(model).expanduser()
    if path.exists():
        params = load_params(path)
        directory = path if path.is_dir() else path.parent
        shards = sorted(directory.glob("consolidated*.safetensors"))
        if shards:
            size, source = sum(s.stat().st_size for s in shards), f"size of {', '.join(s.name for s in shards)}"
        else:
            size, source = weight_bytes_estimate(params), "estimated from params"
        return Model(params, str(directory), f"{directory / 'params.json'}", size, source)
    if _HUB_ID.match(model) and not model.startswith("."):
        return _builtin(model)
    raise ParamsError(f"--model {model}: no such directory, and not a hub id")


def _builtin(name: str) -> Model:
    params = VOXTRAL_MINI_4B_REALTIME
    source = f"built-in published {HUB_ID} dimensions"
    if name.lower() != HUB_ID.lower():
        source += f" (assumed for {name})"
    return Model(params, name, source, weight_bytes_estimate(params), "estimated from params")


def _choices(preset: EnginePreset, params: VoxtralParams, extra: list[WindowChoice] | None) -> list[WindowChoice]:
    own = WindowChoice(preset.decoder_window, preset.encoder_window, "preset")
    seen: set[tuple[int, int]] = set()
    out = []
    for choice in [own, *(extra or WINDOW_CHOICES)]:
        key = (choice.decoder or params.decoder_window, choice.encoder or params.encoder_window)
        if key not in seen:
            seen.add(key)
            out.append(choice)
    return out


def plan_row(
    model: Model, preset: EnginePreset, choice: WindowChoice, budget: Budget, *, block_size: int, tokens_per_step: int
) -> dict[str, Any]:
    p = model.params
    engine = preset.with_windows(choice.decoder, choice.encoder)
    dec_w, enc_w = choice.decoder or p.decoder_window, choice.encoder or p.encoder_window
    usage = {
        layout: stream_kv(
            kv_groups(p, dec_w, enc_w, block_size=block_size, kv_cache_dtype=preset.kv_cache_dtype, layout=layout),
            engine.max_model_len,
            tokens_per_step,
        )
        for layout in ("vllm", "exact")
    }
    per_stream = usage["vllm"].bytes
    memory_streams = budget.kv_bytes // per_stream
    streams = min(memory_streams, engine.max_num_seqs)
    notes = []
    if streams == 0:
        notes.append(f"does not fit: KV budget {format_size(budget.kv_bytes)} < one stream {format_size(per_stream)}")
    elif streams < engine.max_num_seqs:
        engine = replace(engine, max_num_seqs=streams)
        notes.append(
            f"memory admits only {streams} of the preset's {preset.max_num_seqs} streams: "
            "--max-num-seqs lowered so admission, not vLLM preemption, turns sessions away"
        )
    elif memory_streams > engine.max_num_seqs:
        more = engine.with_max_num_seqs(memory_streams)
        notes.append(
            f"memory admits {memory_streams}; if the GPU keeps up (12.5 steps/s per stream) use "
            f"--max-num-seqs {memory_streams} --max-num-batched-tokens {more.max_num_batched_tokens}"
        )
    if dec_w <= DECODER_BREAK_POINT:
        notes.append(f"decoder window {dec_w} ≤ {DECODER_BREAK_POINT}: transcripts degrade (LinTO break point)")
    if engine.max_model_len - dec_w <= REANCHOR_MARGIN:
        notes.append(
            f"max_model_len {engine.max_model_len} − decoder window {dec_w} ≤ {REANCHOR_MARGIN} (re-anchor "
            "margin): re-anchoring cannot fire; sessions roll over at the cap"
        )
    serve = ["voxgate", "serve", "--engine", "voxtral", "--model", model.name, *engine.serve_flags()]
    vllm = [
        "vllm",
        "serve",
        model.name,
        "--tokenizer-mode",
        "mistral",
        "--config-format",
        "mistral",
        "--load-format",
        "mistral",
        *engine.vllm_flags(),
    ]
    return {
        "label": choice.label,
        "decoder_window": dec_w,
        "encoder_window": enc_w,
        "kv_bytes_per_stream": per_stream,
        "kv_bytes_per_stream_exact": usage["exact"].bytes,
        "groups": {layout: [vars(g) for g in u.groups] for layout, u in usage.items()},
        "memory_streams": memory_streams,
        "max_streams": streams,
        "engine": engine.engine_kwargs() if streams else None,
        "env": engine.env_dict(),
        "serve_flags": engine.serve_flags() if streams else None,
        "serve_command": shlex.join(serve) if streams else None,
        "vllm_flags": engine.vllm_flags() if streams else None,
        "vllm_command": f"{engine.env_prefix()} {shlex.join(vllm)}" if streams else None,
        "notes": notes,
    }


def build_plan(args: argparse.Namespace) -> dict[str, Any]:
    model = resolve_model(args.model)
    if args.block_size <= 0 or args.tokens_per_step <= 0:
        raise ValueError("--block-size and --tokens-per-step must be positive")
    weight_bytes = model.weight_bytes if args.weights is None else args.weights
    weight_source = model.weight_source if args.weights is None else "--weights"
    presets = [get_preset(args.preset)] if args.preset else list(PRESETS.values())
    out: dict[str, Any] = {
        "model": model.name,
        "source": model.source,
        "params": model.params.as_dict(),
        "gpu_memory_bytes": args.gpu_memory,
        "block_size": args.block_size,
        "tokens_per_step": args.tokens_per_step,
        "weight_bytes": weight_bytes,
        "weight_source": weight_source,
        "presets": [],
    }
    for preset in presets:
        if args.max_model_len is not None:
            preset = replace(preset, max_model_len=args.max_model_len)
        reserve = preset.reserve_bytes if args.reserve is None else args.reserve
        budget = Budget(args.gpu_memory, preset.gpu_memory_utilization, weight_bytes, reserve)
        rows = [
            plan_row(model, preset, c, budget, block_size=args.block_size, tokens_per_step=args.tokens_per_step)
            for c in _choices(preset, model.params, args.window)
        ]
        for row in rows:  # the CPU ceiling of the box next to its GPUs' memory (plan/cpu.py)
            row["cpu"] = cpu_plan(
                args.cpu_cores, args.gpus, row["memory_streams"], args.front_end_mc, args.service_mc
            ).as_dict()
        out["presets"].append(
            {
                "preset": preset.name,
                "description": preset.description,
                "gpu_memory_utilization": preset.gpu_memory_utilization,
                "max_num_seqs": preset.max_num_seqs,
                "max_model_len": preset.max_model_len,
                "kv_cache_dtype": preset.kv_cache_dtype,
                "kv_dtype_bytes": model.params.dtype_bytes
                if preset.kv_cache_dtype == "auto"
                else dtype_bytes(preset.kv_cache_dtype),
                "usable_bytes": budget.usable_bytes,
                "reserve_bytes": reserve,
                "kv_budget_bytes": budget.kv_bytes,
                "rows": rows,
            }
        )
    return out


def _groups_text(groups: list[dict[str, Any]]) -> str:
    return ", ".join(
        f"{g['name']} {g['blocks']}×{g['block_size']}-token blocks ({g['window_tokens']} tokens, {g['layers']} layers)"
        for g in groups
    )


def render_text(plan: dict[str, Any]) -> str:
    lines = [
        f"voxgate plan: {plan['model']} — {plan['source']}",
        f"GPU {format_size(plan['gpu_memory_bytes'])}, KV block size {plan['block_size']}, "
        f"weights {format_size(plan['weight_bytes'])} ({plan['weight_source']})",
    ]
    for pre in plan["presets"]:
        lines += [
            "",
            f"preset {pre['preset']}: {pre['description']}",
            f"  KV budget = {format_size(pre['usable_bytes'])} (× {pre['gpu_memory_utilization']:g}) − weights "
            f"{format_size(plan['weight_bytes'])} − reserve {format_size(pre['reserve_bytes'])} = "
            f"{format_size(pre['kv_budget_bytes'])}",
        ]
        for row in pre["rows"]:
            windows = f"{row['decoder_window']}/{row['encoder_window']}"
            label = "" if row["label"] == windows else f" ({row['label']})"
            lines += [
                f"  windows {windows}{label}: "
                f"KV/stream {format_size(row['kv_bytes_per_stream'])} = {row['kv_bytes_per_stream']} B "
                f"(model itself needs {format_size(row['kv_bytes_per_stream_exact'])}); "
                f"memory admits {row['memory_streams']}, max streams {row['max_streams']}",
                f"    vLLM layout: {_groups_text(row['groups']['vllm'])}",
            ]
            if row["serve_command"]:
                lines += [f"    {row['serve_command']}", f"    {row['vllm_command']}"]
            lines += [f"    note: {n}" for n in row["notes"]]
            if row.get("cpu") and row["memory_streams"]:
                lines += [f"    {line}" for line in render_cpu(CpuPlan(**row["cpu"]))]
    return "\n".join(lines)


def run_plan(args: argparse.Namespace) -> int:
    try:
        plan = build_plan(args)
    except (ParamsError, ValueError) as exc:
        print(f"voxgate plan: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(plan, indent=2) if args.json else render_text(plan))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="voxgate plan", description=__doc__.splitlines()[0] if __doc__ else None)
    add_plan_arguments(parser)
    return run_plan(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
