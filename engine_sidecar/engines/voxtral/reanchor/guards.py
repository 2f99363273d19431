"""Start-up guards the sidecar runs before it builds the engine, each failing with its reason.

The worker runs the rest once the model and KV cache exist (worker.ReanchorWorkerExtension.
voxgate_reanchor_setup): sliding windows everywhere, plain RoPE with the expected theta and style,
KV layout, margin bounds. Any failure means rollover instead, said in the log, in SessionStarted
and in a metric.
"""

from __future__ import annotations

from typing import Any

from engine_sidecar.engines.voxtral.vllm_window.installed import missing
from engine_sidecar.engines.voxtral.vllm_window.symbols import REANCHOR_CONCERNS, for_release
from engine_sidecar.engines.voxtral.vllm_window.versions import Release


def config_problems(options: Any, release: Release | None) -> list[str]:
    """Reasons, from the engine options and the installed vLLM, why re-anchoring cannot run; empty when it can."""
    problems = []
    if release is None:
        problems.append("vLLM is outside the verified window (allowed by allow_unlisted_vllm): re-anchoring is off")
    if _quantized_kv(str(options.kv_cache_dtype)):
        problems.append(
            f"KV cache dtype {options.kv_cache_dtype} is quantized: its keys cannot be rotated in place exactly"
        )
    if options.enable_prefix_caching:
        problems.append("prefix caching is on: rotated blocks would poison shared cache entries")
    if not 0 < options.reanchor_margin_tokens < options.max_model_len:
        problems.append(f"reanchor margin {options.reanchor_margin_tokens} must be in (0, max_model_len)")
    if release is not None and (lacking := missing(for_release(release.name, REANCHOR_CONCERNS))):
        problems.append("vLLM lacks what the extension relies on: " + ", ".join(lacking))
    return problems


def _quantized_kv(kv_cache_dtype: str) -> bool:
    """vLLM's own predicate (fp8*, nvfp4*, *per_token_head, ...), so a new quantized dtype is refused too."""
    from vllm.v1.kv_cache_interface import is_quantized_kv_cache

    return bool(is_quantized_kv_cache(kv_cache_dtype))
