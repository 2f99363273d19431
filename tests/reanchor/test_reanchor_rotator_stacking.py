"""KeyRotator rotating a KV group's layers stacked (stack_bytes > 0) gives the same result, bit for bit, as one
layer at a time (the default), in far fewer kernels: on a GPU an event is launch-bound (docs/reanchoring.md).
Caches at Voxtral's shapes as vLLM 0.32 lays them out on CUDA (scripts/device_check.py's emulation)."""

from __future__ import annotations

import collections
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from engine_sidecar.engines.voxtral.reanchor.rotator import STACK_BYTES, KeyRotator
from engine_sidecar.engines.voxtral.reanchor.settings import ReanchorSettings
from scripts.device_check import STACKING_LIVE, check_stacking, stacking_shift, stacking_targets

CPU = torch.device("cpu")
LAYERS = 3  # of each kind
DECODER_LAYER_BYTES = len(STACKING_LIVE) * 16 * 8 * 128 * 2  # one decoder layer's live keys, bf16


class KernelCount(TorchDispatchMode):
    """aten ops that run a kernel (one launch each on a GPU): every op but views and metadata."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if not func.is_view and func.overloadpacket.__name__ not in ("lift_fresh", "_unsafe_view"):
            self.ops[str(func)] += 1
        return func(*args, **(kwargs or {}))


def rotated(stack_bytes: int, layers: int = LAYERS) -> tuple[list[torch.Tensor], int]:
    targets, views = stacking_targets(CPU, layers)
    count = KernelCount()
    with count:
        KeyRotator(tuple(targets), ReanchorSettings(), stack_bytes=stack_bytes).rotate(stacking_shift())
    return views, sum(count.ops.values())


# All of a group at once; decoder layers two at a time and encoder layers (8x the bytes) one at a time.
@pytest.mark.parametrize("stack_bytes", [STACK_BYTES, 2 * DECODER_LAYER_BYTES])
def test_stacked_layers_rotate_bit_for_bit_as_one_layer_at_a_time(stack_bytes: int) -> None:
    one_by_one, ops_one = rotated(0)
    stacked, ops_stacked = rotated(stack_bytes)
    _, untouched = stacking_targets(CPU, LAYERS)
    assert all(torch.equal(a, b) for a, b in zip(one_by_one, stacked, strict=True))
    assert not any(torch.equal(a, u) for a, u in zip(one_by_one, untouched, strict=True))  # something rotated
    assert ops_stacked < ops_one


def test_a_whole_group_stacked_launches_a_fraction_of_the_kernels_per_layer() -> None:
    # Kernels each extra layer adds (the event's fixed part, the shift tables, is the same either way). One at a
    # time a layer launches a gather, a float32 copy, four multiplies, an add, a sub, a join, a copy back and a
    # scatter; stacked it keeps its gather and its scatter, and the group shares the rest.
    one = (rotated(0, 2 * LAYERS)[1] - rotated(0)[1]) / (2 * LAYERS)
    stacked = (rotated(STACK_BYTES, 2 * LAYERS)[1] - rotated(STACK_BYTES)[1]) / (2 * LAYERS)
    assert stacked <= 2 and one >= 10, (stacked, one)


def test_the_device_checks_stacking_check_passes_here() -> None:
    assert check_stacking(CPU) == {"layers": 8, "bitwise_equal": True, "ok": True}


def test_the_default_is_one_layer_at_a_time() -> None:
    # Stacking waits for a GPU run that shows it faster (reanchor/rotator.py, STACK_BYTES).
    assert KeyRotator((), ReanchorSettings()).stack_bytes == 0
