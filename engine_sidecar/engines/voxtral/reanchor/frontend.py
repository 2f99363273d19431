"""Front-end side (the process that owns AsyncLLM: the sidecar): the model's realtime buffer counts a
session's tokens and ends its input at max_model_len. With re-anchoring the clock never gets there, so
the buffer is built without that cap. Its token count is a local of a generator: the constructor is the
only hook.
"""

from __future__ import annotations

import inspect
from typing import Any


def uncap_realtime_buffer() -> None:
    """Idempotent; raises RuntimeError if the pinned vLLM's buffer no longer looks as expected."""
    from vllm.model_executor.models import voxtral_realtime as module

    current = module.VoxtralRealtimeBuffer
    if getattr(current, "_voxgate_uncapped", False):
        return
    if "max_model_len" not in inspect.signature(current.__init__).parameters:
        raise RuntimeError("VoxtralRealtimeBuffer no longer takes max_model_len")

    class UncappedBuffer(current):  # type: ignore[misc, valid-type]
        _voxgate_uncapped = True

        def __init__(self, config: Any, prompt_tokens: list[int], max_model_len: int | None = None) -> None:
            super().__init__(config, prompt_tokens, max_model_len=None)

    module.VoxtralRealtimeBuffer = UncappedBuffer  # type: ignore[misc]
