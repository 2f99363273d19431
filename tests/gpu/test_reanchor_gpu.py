"""Re-anchoring on a CUDA GPU with the tiny checkpoint (skipped without CUDA and vLLM): the CUDA attention
backend's key layout is probed and re-anchoring stays token-exact, under vLLM's asynchronous scheduling.

Run by scripts/device_check_reanchor.sh on a lent GPU machine (≤ 5 minutes).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.engine.conftest import Harness
from tests.engine.test_reanchor import SMALL, TINY_GEOMETRY, first_difference, reanchors, run, speech

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cuda() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("vllm")
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU")


def engine(tiny_model: Any, **options: Any) -> Harness:
    return Harness(tiny_model, {"dtype": "float32", "gpu_memory_utilization": 0.3, **TINY_GEOMETRY, **options})


def test_gpu_reanchoring_is_token_exact(cuda: None, tiny_model: Any) -> None:
    pcm = speech(60.0)
    reference = engine(tiny_model, max_model_len=4096)
    try:
        assert reference.engine.info.position_mode == "reanchor", reference.engine.info.position_mode_reason
        expected = run(reference, pcm)
    finally:
        reference.close()
    small = engine(tiny_model, max_model_len=SMALL)
    try:
        assert small.engine.info.position_mode == "reanchor", small.engine.info.position_mode_reason
        result = run(small, pcm)
    finally:
        small.close()
    assert len(reanchors(result)) >= 3
    assert len(expected.token_ids) > SMALL
    assert first_difference(result.token_ids, expected.token_ids) is None
    assert result.token_ids == expected.token_ids


def test_gpu_negative_control_diverges(cuda: None, tiny_model: Any) -> None:
    pcm = speech(40.0)
    reference = engine(tiny_model, max_model_len=4096)
    try:
        expected = run(reference, pcm)
    finally:
        reference.close()
    control = engine(tiny_model, max_model_len=SMALL, reanchor_rotate="none")
    try:
        result = run(control, pcm)
    finally:
        control.close()
    assert reanchors(result)
    assert first_difference(result.token_ids, expected.token_ids) is not None


def _device_check() -> Any:
    """scripts/device_check.py as a module (the torch-only checks, reused here with vLLM's own CUDA op)."""
    from tests.helpers import load_script

    return load_script("device_check")


def test_gpu_keys_written_by_vllms_cache_op_rotate_to_rope_at_p_minus_d(cuda: None) -> None:
    # The key-level check on the production write path: keys at position p written by vLLM's own
    # reshape_and_cache_flash into the 0.32 CUDA layouts (real Voxtral shapes, both groups), probed and rotated by
    # the rotator, equal RoPE at p - D (float64 reference) within bf16/fp16 rounding; one token off does not.
    import torch
    from vllm import _custom_ops as ops

    check = _device_check()
    scale = torch.ones((), dtype=torch.float32, device="cuda")

    def vllm_writer(head_dim: int) -> Any:
        def write(key: Any, value: Any, cache: Any, slots: Any) -> None:
            key_cache, value_cache = cache.transpose(1, 2).split(head_dim, dim=-1)
            ops.reshape_and_cache_flash(key, value, key_cache, value_cache, slots, "auto", scale, scale)

        return write

    for dtype in (torch.bfloat16, torch.float16):
        for layout in check.LAYOUTS:
            for kind in ("decoder", "encoder"):
                report = check.check_rotation(torch.device("cuda"), dtype, layout, kind, vllm_writer)
                assert report["ok"], report


def test_gpu_bf16_on_the_production_backend_stays_within_the_spread_of_equivalent_references(
    cuda: None, tiny_model: Any
) -> None:
    # bf16 selects FlashAttention (float32, above, selects Triton): judged like tests/engine/test_reanchor_bf16.py,
    # within the spread of two equivalent references, since bf16 has no token parity even without re-anchoring.
    from tests.engine.test_reanchor_bf16 import differing

    def tokens(**options: Any) -> tuple[list[int], int]:
        h = engine(tiny_model, dtype="bfloat16", exact_rope_tables=False, **options)
        try:
            assert h.engine.info.position_mode == "reanchor", h.engine.info.position_mode_reason
            result = run(h, pcm)
        finally:
            h.close()
        return result.token_ids, len(reanchors(result))

    pcm = speech(60.0)
    reference, _ = tokens(max_model_len=4096)
    equivalent, _ = tokens(max_model_len=4096, precise_rope=True)
    reanchored, events = tokens(max_model_len=SMALL)
    assert events >= 3 and len(reference) > SMALL
    spread, moved = differing(reference, equivalent), differing(reanchored, reference)
    print(f"GPU bf16, {len(reference)} tokens: references differ in {spread}, re-anchored vs reference in {moved}")
    assert spread > 0 and moved <= spread
