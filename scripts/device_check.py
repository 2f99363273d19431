#!/usr/bin/env python3
"""Torch-only device check of re-anchoring's key rotation: runs on any box with torch, no vLLM.

    python3 scripts/device_check.py --device cuda     # on a GPU box: nothing but this repository needed
    python3 scripts/device_check.py --device cpu      # in CI, so the check never rots

Imports the standard library, torch and the project's re-anchoring math (engine_sidecar/engines/voxtral/:
reanchor's layout probe, rotation and rotator; plan's real model shapes and presets). Prints one JSON summary
and exits non-zero on any failure. What it checks, on the given device:

- rotation: keys written at position p (RoPE in float64, rounded once to the dtype) into vLLM 0.32's CUDA KV
  layouts LBNHC and BLNHC (logical [B, H, N, 2D] per layer, strides as `create_kv_cache_views` makes them, a
  stride-honouring writer like `reshape_and_cache_flash`), with Voxtral's real decoder and encoder shapes, in bf16
  and fp16, are found by the layout probe on the live view and rotated by the rotator's own code path by R(-D):
  they must equal RoPE at p - D within the dtype's rounding (compared against a float64 reference);
- extension: the same rotation reached as vLLM's workers reach it, through the worker extension's
  `voxgate_rotate` (what `collective_rpc` calls) over a model runner's layers, with its acknowledgement;
- graph: a captured CUDA graph that reads the cache, replayed after an in-place rotation, reads the rotated keys
  (CUDA only);
- cost: ms per re-anchor event (one session's live blocks in every layer) at the 16gb and datacenter presets'
  windows and layer counts, and how many synchronizing calls an event makes (CUDA's sync debug mode); the same for
  a KV group's layers rotated stacked (`stacked_*`: KeyRotator(stack_bytes=STACK_BYTES), off by default until a
  GPU shows it faster), interleaved event by event with the default, after checking that it rotates bit for bit
  as the default does (`stacking`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine_sidecar.engines.voxtral.plan import PRESETS, VOXTRAL_MINI_4B_REALTIME  # noqa: E402
from engine_sidecar.engines.voxtral.reanchor.cuda_layouts import flash_writer, layer_views  # noqa: E402
from engine_sidecar.engines.voxtral.reanchor.layout import KeyLayout, KvWriter, probe_key_layout  # noqa: E402
from engine_sidecar.engines.voxtral.reanchor.rotation import RotarySpec, rope_rotate  # noqa: E402
from engine_sidecar.engines.voxtral.reanchor.rotator import DECODER, ENCODER, STACK_BYTES, KeyRotator, LayerTarget  # noqa: E402
from engine_sidecar.engines.voxtral.reanchor.settings import ReanchorSettings  # noqa: E402
from engine_sidecar.engines.voxtral.reanchor.shift import Shift  # noqa: E402
from engine_sidecar.engines.voxtral.reanchor.worker import Armed, ReanchorWorkerExtension, arm  # noqa: E402

BLOCK_SIZE = 16  # vLLM's default on CUDA; the encoder holds block_pool_size states per token
LAYOUTS = ("LBNHC", "BLNHC")  # FlashAttention/Triton's 0.32 default, and the block-outermost one
SHIFT_TOKENS = 4096  # a typical D; the angle is reduced in float64, so the size does not matter for accuracy


WriterFor = Callable[[int], KvWriter]  # head_dim -> the cache writer (the emulation here; vLLM's op in tests/gpu)


def probe(view: torch.Tensor, heads: int, slots: int, head_dim: int, writer_for: WriterFor = flash_writer) -> KeyLayout:
    shape = tuple(view.shape)
    return probe_key_layout(
        writer_for(head_dim), lambda n: (n, *shape[1:]), slots, heads, head_dim, view.dtype, kv_cache_like=view
    )


class _Worker(ReanchorWorkerExtension):
    """What vLLM mixes the extension into: a worker with a model runner (only what the extension reads)."""

    def __init__(self, live: torch.Tensor) -> None:
        group = SimpleNamespace(layer_names=["layer"])
        self.model_runner = SimpleNamespace(
            compilation_config=SimpleNamespace(static_forward_context={"layer": SimpleNamespace(kv_cache=[live])}),
            kv_cache_config=SimpleNamespace(kv_cache_groups=[group]),
        )


def _rotate_through_extension(rotator: KeyRotator, live: torch.Tensor, shift: Shift) -> bool:
    """Rotate as a worker does when the scheduler's collective_rpc arrives; True if it acknowledged the shift."""
    worker = _Worker(live)
    arm(worker, Armed.over(worker.model_runner, rotator, ReanchorSettings(), {}))
    applied = worker.voxgate_rotate((shift,))
    events = worker.voxgate_reanchor_events()["events"]
    return applied == 1 and [(e["seq"], e["tokens"]) for e in events] == [(shift.seq, shift.tokens)]


def check_extension(device: torch.device) -> dict[str, Any]:
    kinds = (DECODER, ENCODER)
    cases = [check_rotation(device, torch.bfloat16, "LBNHC", kind, through_extension=True) for kind in kinds]
    return {"cases": cases, "ok": all(c["ok"] for c in cases)}


def check_rotation(
    device: torch.device,
    dtype: torch.dtype,
    layout: str,
    kind: str,
    writer_for: WriterFor = flash_writer,
    through_extension: bool = False,
) -> dict[str, Any]:
    p = VOXTRAL_MINI_4B_REALTIME
    if kind == DECODER:
        heads, head_dim, states, spec = (
            p.decoder_kv_heads,
            p.decoder_head_dim,
            1,
            RotarySpec(p.decoder_head_dim, p.decoder_head_dim, 1e6, neox=True),
        )
    else:
        heads, head_dim, states = p.encoder_kv_heads, p.encoder_head_dim, p.downsample_factor
        spec = RotarySpec(head_dim, head_dim, 1e6, neox=False, states_per_token=states)
    slots, blocks = BLOCK_SIZE * states, 6
    views = layer_views(layout, 2, blocks, heads, slots, head_dim, dtype, device)
    live = views[1]
    key_layout = probe(live, heads, slots, head_dim, writer_for)
    gen = torch.Generator().manual_seed(7)
    raw = torch.randn(blocks * slots, heads, head_dim, generator=gen, dtype=torch.float64)
    base = 200_000 * states  # far along a long session: large angles
    positions = torch.arange(blocks * slots, dtype=torch.int64) + base
    written = rope_rotate(raw, positions, spec).to(dtype)  # what the model cached: RoPE at p, in the dtype
    writer_for(head_dim)(
        written.to(device), torch.zeros_like(written, device=device), live, torch.arange(blocks * slots, device=device)
    )
    target = LayerTarget("layer", kind, 0, spec, key_layout.key_view(live), key_layout, 1)
    rotator = KeyRotator((target,), ReanchorSettings())
    shift = Shift(req_id="r", tag="r", tokens=SHIFT_TOKENS, clock=0, blocks=(tuple(range(blocks)),), seq=1)
    acknowledged = _rotate_through_extension(rotator, live, shift) if through_extension else True
    if not through_extension:
        rotator.rotate(shift)
    got = key_layout.read(key_layout.key_view(live), torch.arange(blocks, device=device)).reshape(-1, heads, head_dim)
    reference = rope_rotate(raw, positions - SHIFT_TOKENS * states, spec)  # float64 truth at p - D
    err = (got.double().cpu() - reference).abs()
    scale = reference.abs().amax(dim=-1, keepdim=True)  # per key vector: a rotation mixes its elements
    ulp = torch.finfo(dtype).eps
    # Two roundings (the cached key, the rotated one) plus float32 arithmetic: a few ulps of the vector's size.
    rel = float((err / scale).max())
    # Negative control: one token off must be far outside the bound, or the bound proves nothing.
    off_by_one = rope_rotate(raw, positions - (SHIFT_TOKENS - 1) * states, spec)
    control = float(((got.double().cpu() - off_by_one).abs() / scale).max())
    ok = acknowledged and rel <= 4 * ulp < control / 10 and torch.equal(views[0], torch.zeros_like(views[0]))
    return {
        "layout": layout,
        "kind": kind,
        "dtype": str(dtype).removeprefix("torch."),
        "heads": heads,
        "head_dim": head_dim,
        "probed": key_layout.describe(),
        "max_rel_err": rel,
        "ulp": ulp,
        "off_by_one_token_rel_err": control,
        "ok": ok,
    }


def check_graph(device: torch.device) -> dict[str, Any]:
    """A captured graph reading the cache sees an in-place rotation done outside it (the rotated bytes)."""
    if device.type != "cuda":
        return {"ok": True, "skipped": "CUDA graphs need a CUDA device"}
    heads, head_dim, slots = 8, 128, BLOCK_SIZE
    spec = RotarySpec(head_dim, head_dim, 1e6, neox=True)
    live = layer_views("LBNHC", 1, 4, heads, slots, head_dim, torch.bfloat16, device)[0]
    live.normal_()
    key_layout = probe(live, heads, slots, head_dim)
    view = key_layout.key_view(live)
    query = torch.randn(heads, head_dim, device=device, dtype=torch.bfloat16)
    index = torch.arange(4, device=device)
    scores = torch.empty(4 * slots, heads, device=device, dtype=torch.float32)

    def read_scores() -> None:
        keys = key_layout.read(view, index).reshape(-1, heads, head_dim)
        scores.copy_((keys.float() * query.float()).sum(-1))

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        read_scores()  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        read_scores()
    target = LayerTarget("layer", DECODER, 0, spec, view, key_layout, 1)
    KeyRotator((target,), ReanchorSettings()).rotate(
        Shift(req_id="r", tag="r", tokens=SHIFT_TOKENS, clock=0, blocks=((0, 1, 2, 3),))
    )
    graph.replay()
    torch.cuda.synchronize()
    replayed = scores.clone()
    read_scores()
    return {"ok": bool(torch.equal(replayed, scores))}


STACKING_LIVE = (1, 2, 5, 6)  # a session's live blocks in both groups, out of STACKING_BLOCKS
STACKING_BLOCKS = 8


def stacking_targets(device: torch.device, layers: int, seed: int = 3) -> tuple[list[LayerTarget], list[torch.Tensor]]:
    """`layers` decoder and `layers` encoder layers at Voxtral's shapes (LBNHC, bf16; one KV group each), random
    keys: for comparing a rotation one layer at a time with the same stacked."""
    p = VOXTRAL_MINI_4B_REALTIME
    gen = torch.Generator().manual_seed(seed)
    targets, views = [], []
    for group, (kind, heads, head_dim, states, neox) in enumerate(
        (
            (DECODER, p.decoder_kv_heads, p.decoder_head_dim, 1, True),
            (ENCODER, p.encoder_kv_heads, p.encoder_head_dim, p.downsample_factor, False),
        )
    ):
        stack = layer_views(
            "LBNHC", layers, STACKING_BLOCKS, heads, BLOCK_SIZE * states, head_dim, torch.bfloat16, device
        )
        key_layout = probe(stack[0], heads, BLOCK_SIZE * states, head_dim)
        spec = RotarySpec(head_dim, head_dim, 1e6, neox=neox, states_per_token=states)
        for i, view in enumerate(stack):
            view.copy_(torch.randn(view.shape, generator=gen).to(torch.bfloat16))
            targets.append(LayerTarget(f"{kind}.{i}", kind, group, spec, key_layout.key_view(view), key_layout, 1))
            views.append(view)
    return targets, views


def stacking_shift() -> Shift:
    return Shift(req_id="r", tag="r", tokens=SHIFT_TOKENS, clock=0, blocks=(STACKING_LIVE, STACKING_LIVE))


def check_stacking(device: torch.device) -> dict[str, Any]:
    """A KV group's layers rotated stacked (stack_bytes=STACK_BYTES) equal one layer at a time, bit for bit."""
    (one, one_views), (stacked, stacked_views) = stacking_targets(device, 4), stacking_targets(device, 4)
    KeyRotator(tuple(one), ReanchorSettings()).rotate(stacking_shift())
    KeyRotator(tuple(stacked), ReanchorSettings(), stack_bytes=STACK_BYTES).rotate(stacking_shift())
    equal = all(torch.equal(a, b) for a, b in zip(one_views, stacked_views, strict=True))
    return {"layers": len(one), "bitwise_equal": equal, "ok": equal}


def check_cost(device: torch.device, preset_name: str, repeats: int) -> dict[str, Any]:
    """ms per event: one session's live blocks, every decoder and encoder layer, as the rotator does it."""
    rotator, shift = check_cost_rotator(device, preset_name)
    stacked = dataclasses.replace(rotator, stack_bytes=STACK_BYTES)  # the candidate, timed alongside
    dec_blocks, enc_blocks = (len(b) for b in shift.blocks)
    sync = _synchronize(device)
    times: dict[str, list[float]] = {"layer": [], "stacked": []}
    for r in (rotator, stacked):  # warm-up
        r.rotate(shift)
    sync()
    for _ in range(repeats):  # interleaved, so the machine's drift hits both
        for name, r in (("layer", rotator), ("stacked", stacked)):
            start = time.perf_counter()
            r.rotate(shift)
            sync()
            times[name].append((time.perf_counter() - start) * 1000)
    sites = _sync_sites(device, lambda: rotator.rotate(shift))
    stacked_sites = _sync_sites(device, lambda: stacked.rotate(shift))
    layer, stack = sorted(times["layer"]), sorted(times["stacked"])
    return {
        "preset": preset_name,
        "layers": len(rotator.targets),
        "blocks": [dec_blocks, enc_blocks],
        "ms_median": round(layer[len(layer) // 2], 3),
        "ms_max": round(layer[-1], 3),
        "host_syncs": None if sites is None else len(sites),
        "sync_sites": sites,
        "stacked_ms_median": round(stack[len(stack) // 2], 3),
        "stacked_ms_max": round(stack[-1], 3),
        "stacked_host_syncs": None if stacked_sites is None else len(stacked_sites),
        "ok": True,
    }


def check_cost_rotator(device: torch.device, preset_name: str) -> tuple[KeyRotator, Shift]:
    """A KeyRotator over every decoder and encoder layer at the preset's windows (LBNHC, bf16), and one
    session's shift of its live blocks (also bench/reanchor.py's before/after event benchmark)."""
    p, preset = VOXTRAL_MINI_4B_REALTIME, PRESETS[preset_name]
    dec_window = preset.decoder_window or p.decoder_window  # None in a preset: the model's own
    enc_window = preset.encoder_window or p.encoder_window
    dec_blocks = math.ceil(dec_window / BLOCK_SIZE) + 1
    enc_blocks = math.ceil(enc_window / (BLOCK_SIZE * p.downsample_factor)) + 1
    pool = max(dec_blocks, enc_blocks) + 2
    targets = []
    for kind, layers, heads, head_dim, states, neox in (
        (DECODER, p.decoder_layers, p.decoder_kv_heads, p.decoder_head_dim, 1, True),
        (ENCODER, p.encoder_layers, p.encoder_kv_heads, p.encoder_head_dim, p.downsample_factor, False),
    ):
        views = layer_views("LBNHC", layers, pool, heads, BLOCK_SIZE * states, head_dim, torch.bfloat16, device)
        key_layout = probe(views[0], heads, BLOCK_SIZE * states, head_dim)
        spec = RotarySpec(head_dim, head_dim, 1e6, neox=neox, states_per_token=states)
        group = 0 if kind == DECODER else 1
        targets += [
            LayerTarget(f"{kind}.{i}", kind, group, spec, key_layout.key_view(v), key_layout, 1)
            for i, v in enumerate(views)
        ]
    rotator = KeyRotator(tuple(targets), ReanchorSettings())
    shift = Shift(
        req_id="r", tag="r", tokens=SHIFT_TOKENS, clock=0, blocks=(tuple(range(dec_blocks)), tuple(range(enc_blocks)))
    )
    return rotator, shift


def _synchronize(device: torch.device) -> Any:
    return torch.cuda.synchronize if device.type == "cuda" else (lambda: None)


def _sync_sites(device: torch.device, fn: Any) -> list[str] | None:
    """Where `fn` made a synchronizing CUDA call (file:line of the Python caller, one per call), from torch's sync
    debug mode (None off CUDA: nothing to wait for)."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    root = Path(__file__).resolve().parent.parent
    return [f"{_relative(w.filename, root)}:{w.lineno}" for w in caught if "synchroniz" in str(w.message).lower()]


def _relative(filename: str, root: Path) -> str:
    path = Path(filename).resolve()
    return str(path.relative_to(root)) if path.is_relative_to(root) else "/".join(path.parts[-3:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda | cpu (default cuda)")
    parser.add_argument("--repeats", type=int, default=20, help="timed events per preset")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"ok": False, "error": "no CUDA device (use --device cpu)"}))
        return 2
    started = time.perf_counter()
    report: dict[str, Any] = {
        "device": args.device,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if device.type == "cuda" else None,
    }
    checks: list[dict[str, Any]] = []
    for dtype in (torch.bfloat16, torch.float16):
        for layout in LAYOUTS:
            for kind in (DECODER, ENCODER):
                checks.append(_guarded("rotation", check_rotation, device, dtype, layout, kind))
    checks.append(_guarded("extension", check_extension, device))
    checks.append(_guarded("graph", check_graph, device))
    checks.append(_guarded("stacking", check_stacking, device))
    for preset in PRESETS:
        checks.append(_guarded("cost", check_cost, device, preset, args.repeats))
    report["checks"] = checks
    report["ok"] = all(c["ok"] for c in checks)
    report["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report, indent=1))
    return 0 if report["ok"] else 1


def _guarded(name: str, check: Any, *args: Any) -> dict[str, Any]:
    """A check that raises is a failure with its reason, never a crash of the whole report."""
    try:
        return {"check": name, **check(*args)}
    except Exception as exc:
        return {"check": name, "ok": False, "error": repr(exc)}


if __name__ == "__main__":
    sys.exit(main())
