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
