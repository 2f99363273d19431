"""The worker-side accessors re-anchoring uses, the same for model runner V1 and V2 (symbols.WORKER)."""

from __future__ import annotations

from typing import Any


def model_runner(worker: Any) -> Any:
    """The worker's model runner: `Worker.model_runner` on GPU and CPU, V1 and V2."""
    return worker.model_runner


def kv_cache(layer: Any) -> Any:
    """An attention layer's live KV cache tensor, as vLLM bound it (a one-element list in V1)."""
    kv = layer.kv_cache
    return kv[0] if isinstance(kv, list) else kv


def kv_fingerprint(runner: Any) -> tuple[Any, ...]:
    """Where every attention layer's KV cache lies now: vLLM may re-bind it (0.34's extensible cache grows once
    after warm-up), and a rotator built over the old tensors would rotate memory no longer in use."""
    layers = runner.compilation_config.static_forward_context
    out = []
    for group in runner.kv_cache_config.kv_cache_groups:
        for name in group.layer_names:
            kv = kv_cache(layers[name])
            out.append((name, kv.data_ptr(), tuple(kv.shape)))
    return tuple(out)
