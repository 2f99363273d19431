"""vLLM 0.32's CUDA KV-cache layouts and cache writer, emulated in plain torch for checks without vLLM's CUDA build.

Per layer, 0.32 views one buffer as logical [B, H, N, 2·D] (keys then values in the last dim) with the physical
order a `KVCacheLayout` names (vllm/v1/kv_cache_layout.py); FlashAttention writes keys with
`reshape_and_cache_flash` into `cache.transpose(1, 2).split(D, dim=-1)`, honouring every stride. Used by
scripts/device_check.py (no vLLM there) and, beside vLLM's own `create_kv_cache_views`, by the layout tests.
"""

from __future__ import annotations

import torch

from engine_sidecar.engines.voxtral.reanchor.layout import KvWriter

# Physical order of the logical axes (L, B, H, N, C), outermost first.
STRIDE_ORDERS = {"LBHNC": (0, 1, 2, 3, 4), "LBNHC": (0, 1, 3, 2, 4), "BLNHC": (1, 0, 3, 2, 4)}


def layer_views(
    layout: str,
    layers: int,
    blocks: int,
    heads: int,
    slots: int,
    head_dim: int,
    dtype: torch.dtype,
    device: torch.device | str = "cpu",
) -> list[torch.Tensor]:
    """Per-layer [B, H, N, 2D] views of one zeroed buffer, strided as `create_kv_cache_views` lays them out."""
    shape = (layers, blocks, heads, slots, 2 * head_dim)
    strides = [0] * 5
    step = 1
    for axis in reversed(STRIDE_ORDERS[layout]):
        strides[axis] = step
        step *= shape[axis]
    whole = torch.as_strided(torch.zeros(step, dtype=dtype, device=device), shape, strides)
    return [whole[i] for i in range(layers)]


def flash_writer(head_dim: int) -> KvWriter:
    """reshape_and_cache_flash's effect on FlashAttention's split of a [B, H, N, 2D] cache: key i at
    (slot // N, slot % N), every stride honoured."""

    def write(key: torch.Tensor, value: torch.Tensor, cache: torch.Tensor, slots: torch.Tensor) -> None:
        key_cache, value_cache = cache.transpose(1, 2).split(head_dim, dim=-1)
        per_block = cache.shape[2]
        key_cache[slots // per_block, slots % per_block] = key
        value_cache[slots // per_block, slots % per_block] = value

    return write
