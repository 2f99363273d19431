"""Worker side: which cached keys belong to which rotary embedding, and rotating them at an event.

Built once per worker after the KV cache exists. Every attention layer is matched to its rotary
module by object identity (the encoder registers its layers under `...layers.N.layers.self_attn.attn`,
so names would mislead), its key layout is found by probing the backend's own cache-write op, and its
rotary style and positions-per-token are taken from the layer's class, never inferred from head size.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from engine_sidecar.engines.voxtral.reanchor.layout import KeyLayout, LayoutError, probe_key_layout
from engine_sidecar.engines.voxtral.reanchor.rotation import (
    RotarySpec,
    ShiftTables,
    inv_freq64,
    rope_rotate,
    rotate_keys_,
    shift_tables,
    to_device,
)
from engine_sidecar.engines.voxtral.reanchor.settings import ReanchorSettings
from engine_sidecar.engines.voxtral.reanchor.shift import Shift
from engine_sidecar.engines.voxtral.vllm_window.worker import kv_cache

DECODER, ENCODER = "decoder", "encoder"
ENCODER_THETA = 1e6  # vLLM's causal Whisper encoder hard-codes it


class Unsupported(Exception):
    """A start-up guard failed: re-anchoring would not be exact here (reason in the message)."""


@dataclass(frozen=True)
class LayerTarget:
    name: str
    kind: str  # DECODER | ENCODER
    group: int  # KV-cache group index
    spec: RotarySpec
    keys: torch.Tensor  # layout.key_view of the live cache: [kernel blocks, *slot digits, *head, *dim digits]
    layout: KeyLayout
    kernel_blocks_per_block: int  # kernel blocks may be finer than the scheduler's blocks


# On a GPU an event is kernel launches, not bytes (an H200: ~12 ms for 58 layers at either preset's windows, twice
# the keys at one; docs/reanchoring.md). Stacking a KV group's layers, up to this many bytes of keys at a time, cuts
# Voxtral's 660 kernels an event to 188-228; the float32 rotation's temporaries make an event's transient memory
# ~10x this. Off by default until a GPU run shows it faster (scripts/device_check.py times both); on a CPU it is
# slower (the stacking copy is memory traffic, and launches cost nothing there).
STACK_BYTES = 16 * 2**20


@dataclass(frozen=True)
class _Read:
    target: LayerTarget
    index: torch.Tensor
    keys: torch.Tensor  # the target's live keys, a copy: rotated, then written back into the cache


@dataclass(frozen=True)
class KeyRotator:
    targets: tuple[LayerTarget, ...]
    settings: ReanchorSettings
    stack_bytes: int = 0  # a group's layers' keys rotated together up to this many bytes (0: one layer at a time)

    def rotate(self, shift: Shift) -> None:
        tables: dict[RotarySpec, ShiftTables] = {}  # one float64 table per spec per event, not per layer
        indices: dict[tuple[int, int, torch.device], torch.Tensor | None] = {}  # one copy per group, not per layer
        batch: list[_Read] = []
        for target in self.targets:
            if not (self.settings.rotate_decoder if target.kind == DECODER else self.settings.rotate_encoder):
                continue
            device = target.keys.device
            where = (target.group, target.kernel_blocks_per_block, device)
            if where not in indices:
                indices[where] = _index_tensor(
                    _kernel_blocks(shift.blocks[target.group], target.kernel_blocks_per_block), device
                )
            index = indices[where]
            if index is None:
                continue
            if target.spec not in tables:
                tables[target.spec] = shift_tables(target.spec, shift.tokens, device)
            read = _Read(target, index, target.layout.read(target.keys, index))
            if batch and not self._joins(batch, read):
                _rotate_batch(batch, tables[batch[0].target.spec])
                batch = []
            batch.append(read)
        if batch:
            _rotate_batch(batch, tables[batch[0].target.spec])

    def _joins(self, batch: list[_Read], read: _Read) -> bool:
        """Whether `read` can be rotated with `batch`: same group, blocks and rotation, and room under the limit."""
        first = batch[0]
        return (
            read.index is first.index
            and read.target.spec == first.target.spec
            and read.keys.shape == first.keys.shape
            and read.keys.dtype == first.keys.dtype
            and (len(batch) + 1) * read.keys.nbytes <= self.stack_bytes
        )

    def describe(self) -> list[dict[str, Any]]:
        return [
            {
                "layer": t.name,
                "kind": t.kind,
                "group": t.group,
                "layout": t.layout.describe(),
                "dtype": str(t.keys.dtype).removeprefix("torch."),
                "head_dim": t.spec.head_dim,
                "rotary_dim": t.spec.rotary_dim,
                "neox": t.spec.neox,
                "states_per_token": t.spec.states_per_token,
                "base": t.spec.base,
            }
            for t in self.targets
        ]


def _rotate_batch(batch: list[_Read], table: ShiftTables) -> None:
    # One layer alone is rotated where it was read (a view with a batch dim), not copied into a stack of one.
    keys = torch.stack([r.keys for r in batch]) if len(batch) > 1 else batch[0].keys.unsqueeze(0)
    rotate_keys_(keys, batch[0].target.spec, table)
    for r, rotated in zip(batch, keys, strict=True):
        r.target.layout.write(r.target.keys, r.index, rotated)


def _kernel_blocks(block_ids: Iterable[int], ratio: int) -> list[int]:
    return [b * ratio + i for b in block_ids for i in range(ratio)]


def _index_tensor(ids: list[int], device: torch.device) -> torch.Tensor | None:
    """The block ids on `device`, copied without waiting for the step in flight."""
    return to_device(torch.tensor(ids, dtype=torch.long), device) if ids else None


def build_rotator(runner: Any, settings: ReanchorSettings) -> KeyRotator:
    """Raises Unsupported with the reason when a guard fails."""
    from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding
    from vllm.v1.kv_cache_interface import SlidingWindowSpec

    rotaries = {
        id(m.attn): m.rotary_emb
        for m in runner.get_model().modules()
        if hasattr(m, "rotary_emb") and hasattr(m, "attn")
    }
    layers = runner.compilation_config.static_forward_context
    config = runner.kv_cache_config
    targets: list[LayerTarget] = []
    probed: dict[tuple[Any, ...], KeyLayout] = {}
    for group_index, group in enumerate(config.kv_cache_groups):
        spec = group.kv_cache_spec
        if not isinstance(spec, SlidingWindowSpec):
            raise Unsupported(
                f"KV group {group_index} is {type(spec).__name__}: re-anchoring needs sliding-window "
                "attention everywhere (full attention would need every position since the start)"
            )
        for name in group.layer_names:
            layer = layers[name]
            kind, states, neox, theta = _layer_kind(layer, runner)
            rotary = rotaries.get(id(layer))
            if rotary is None:
                raise Unsupported(f"no rotary embedding found for attention layer {name}")
            if type(rotary) is not RotaryEmbedding:
                raise Unsupported(f"{name}: {type(rotary).__name__} is not plain RoPE")
            if bool(rotary.is_neox_style) != neox:
                raise Unsupported(f"{name}: {kind} RoPE expected {'NeoX' if neox else 'GPT-J'} style")
            if theta is not None and float(rotary.base) != theta:
                raise Unsupported(f"{name}: RoPE theta {rotary.base} differs from the expected {theta}")
            rspec = RotarySpec(
                head_dim=int(rotary.head_size),
                rotary_dim=int(rotary.rotary_dim),
                base=float(rotary.base),
                neox=neox,
                states_per_token=states,
            )
            kv = kv_cache(layer)
            slots, ratio, block_dim = _kernel_geometry(kv, spec.block_size * states, config.num_blocks)
            key = (type(layer.impl), tuple(kv.shape), kv.stride(), kv.dtype, slots)
            if key not in probed:
                probed[key] = _probe(layer, kv, slots, block_dim, spec.num_kv_heads, spec.head_size)
            layout = probed[key]
            targets.append(LayerTarget(name, kind, group_index, rspec, layout.key_view(kv), layout, ratio))
    return KeyRotator(tuple(targets), settings)


def _layer_kind(layer: Any, runner: Any) -> tuple[str, int, bool, float | None]:
    """(kind, positions per token, NeoX style, expected theta) from the layer's class: explicit, per group."""
    from vllm.model_executor.layers.attention import Attention
    from vllm.model_executor.models.whisper_causal import WhisperCausalAttentionWithBlockPooling

    if isinstance(layer, WhisperCausalAttentionWithBlockPooling):
        return ENCODER, int(layer.block_pool_size), False, ENCODER_THETA
    if type(layer) is Attention:
        params = getattr(runner.model_config.hf_text_config, "rope_parameters", None) or {}
        theta = params.get("rope_theta")
        return DECODER, 1, True, float(theta) if theta is not None else None
    raise Unsupported(f"attention layer {layer.layer_name} is a {type(layer).__name__}: unknown position scheme")


def _kernel_geometry(kv: torch.Tensor, slots_per_block: int, num_blocks: int) -> tuple[int, int, int]:
    """(slots per kernel block, kernel blocks per scheduler block, tensor dim counting kernel blocks)."""
    for ratio in (1, 2, 4, 8, 16, 32, 64):
        if slots_per_block % ratio == 0 and num_blocks * ratio in kv.shape:
            return slots_per_block // ratio, ratio, list(kv.shape).index(num_blocks * ratio)
    raise Unsupported(
        f"cannot find the block dimension of a KV cache shaped {tuple(kv.shape)} "
        f"({num_blocks} blocks of {slots_per_block} slots)"
    )


def _probe(layer: Any, kv: torch.Tensor, slots: int, block_dim: int, heads: int, head_dim: int) -> KeyLayout:
    from vllm.v1.kv_cache_interface import is_quantized_kv_cache

    kv_dtype = str(getattr(layer.impl, "kv_cache_dtype", "auto"))
    if is_quantized_kv_cache(kv_dtype):
        raise Unsupported(f"quantized KV cache ({kv_dtype}): keys would need dequantise-rotate-requantise")

    def write(key: torch.Tensor, value: torch.Tensor, cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
        layer.impl.do_kv_cache_update(layer, key, value, cache, slot_mapping)

    def shape(blocks: int) -> tuple[int, ...]:
        dims = list(kv.shape)
        dims[block_dim] = blocks
        return tuple(dims)

    try:
        return probe_key_layout(write, shape, slots, heads, head_dim, kv.dtype, kv_cache_like=kv)
    except LayoutError as exc:
        raise Unsupported(f"KV layout of {type(layer.impl).__name__}: {exc}") from exc


def precise_rope(runner: Any) -> int:
    """Apply every RoPE in float64 from float64 angles, rounding once to the model dtype."""
    from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding

    count = 0
    for module in runner.get_model().modules():
        if type(module) is RotaryEmbedding:
            count += 1
            spec = RotarySpec(
                int(module.head_size), int(module.rotary_dim), float(module.base), bool(module.is_neox_style)
            )

            def forward(
                positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None, spec: RotarySpec = spec
            ) -> tuple[torch.Tensor, torch.Tensor | None]:
                flat = positions.flatten()
                q = rope_rotate(query.reshape(flat.shape[0], -1, spec.head_dim), flat, spec).view(query.shape)
                if key is None:
                    return q, None
                return q, rope_rotate(key.reshape(flat.shape[0], -1, spec.head_dim), flat, spec).view(key.shape)

            module._forward_method = forward  # CustomOp.forward dispatches through it
    return count


def exact_rope_tables(runner: Any) -> int:
    """Rebuild every RoPE cos/sin table from float64 angles; returns how many tables changed."""
    from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding

    done: set[int] = set()
    for module in runner.get_model().modules():
        if type(module) is RotaryEmbedding and id(module) not in done:
            done.add(id(module))
            cache = module.cos_sin_cache
            spec = RotarySpec(
                int(module.head_size), int(module.rotary_dim), float(module.base), bool(module.is_neox_style)
            )
            angles = torch.arange(cache.shape[0], dtype=torch.float64)[:, None] * inv_freq64(spec)[None, :]
            cache.copy_(torch.cat((angles.cos(), angles.sin()), dim=-1).to(cache.dtype))
    return len(done)
