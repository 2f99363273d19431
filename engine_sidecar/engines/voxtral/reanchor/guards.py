"""Start-up guards the sidecar runs before it builds the engine, each failing with its reason.

The worker runs the rest once the model and KV cache exist (worker.ReanchorWorkerExtension.
voxgate_reanchor_setup): sliding windows everywhere, plain RoPE with the expected theta and style,
KV layout, margin bounds. Any failure means rollover instead, said in the log, in SessionStarted
and in a metric.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

# Every private piece of vLLM 0.32.0 the extension relies on: (module, class, attribute).
# Methods and class attributes are checked with hasattr; attributes set in __init__ in its source.
REQUIRED: tuple[tuple[str, str, str], ...] = (
    ("vllm.v1.core.sched.scheduler", "Scheduler", "_update_request_as_session"),
    ("vllm.v1.core.sched.scheduler", "Scheduler", "schedule"),
    ("vllm.v1.core.sched.scheduler", "Scheduler", "kv_cache_manager"),
    ("vllm.v1.core.sched.scheduler", "Scheduler", "encoder_cache_manager"),
    ("vllm.v1.core.sched.scheduler", "Scheduler", "max_model_len"),
    ("vllm.v1.core.sched.async_scheduler", "AsyncScheduler", "_update_after_schedule"),
    ("vllm.v1.core.encoder_cache_manager", "EncoderCacheManager", "request_cached_ids"),
    ("vllm.v1.core.encoder_cache_manager", "EncoderCacheManager", "free_encoder_input"),
    ("vllm.v1.core.kv_cache_coordinator", "KVCacheCoordinator", "single_type_managers"),
    ("vllm.v1.core.single_type_kv_cache_manager", "SingleTypeKVCacheManager", "req_to_blocks"),
    ("vllm.v1.core.single_type_kv_cache_manager", "SingleTypeKVCacheManager", "num_cached_block"),
    ("vllm.v1.core.single_type_kv_cache_manager", "SingleTypeKVCacheManager", "_null_block"),
    ("vllm.v1.core.single_type_kv_cache_manager", "SingleTypeKVCacheManager", "block_pool"),
    ("vllm.v1.core.single_type_kv_cache_manager", "SlidingWindowManager", "get_num_skipped_tokens"),
    ("vllm.v1.request", "Request", "_all_token_ids"),
    ("vllm.v1.request", "Request", "num_prompt_tokens"),
    ("vllm.v1.request", "Request", "num_in_flight_tokens"),
    ("vllm.v1.request", "Request", "num_stale_output_tokens"),
    ("vllm.v1.request", "Request", "block_hashes"),
    ("vllm.v1.request", "Request", "mm_features"),
    ("vllm.v1.core.block_pool", "BlockPool", "free_blocks"),
    ("vllm.v1.core.block_pool", "BlockPool", "null_block"),
    ("vllm.v1.engine.core", "EngineCore", "scheduler"),
    ("vllm.v1.engine.core", "EngineCore", "collective_rpc"),
    ("vllm.v1.engine.core_client", "AsyncMPClient", "call_utility_async"),
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner", "_update_states"),
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner", "kv_cache_config"),
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner", "requests"),
    ("vllm.model_executor.layers.attention.attention", "Attention", "kv_cache"),
    ("vllm.model_executor.layers.rotary_embedding.base", "RotaryEmbedding", "cos_sin_cache"),
    ("vllm.model_executor.models.voxtral_realtime", "VoxtralRealtimeBuffer", "__init__"),
    ("vllm.model_executor.models.whisper_causal", "WhisperCausalAttentionWithBlockPooling", "block_pool_size"),
)


def missing_attributes(required: Iterable[tuple[str, str, str]] = REQUIRED) -> list[str]:
    """'module.Class.attr' for each required attribute that the installed vLLM lacks."""
    import importlib

    missing = []
    for module_name, class_name, attr in required:
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            missing.append(f"{module_name}.{class_name}")
            continue
        if hasattr(cls, attr):
            continue
        source = "".join(_source(base) for base in cls.__mro__ if base.__module__.startswith("vllm"))
        if f"self.{attr} " not in source and f"self.{attr}:" not in source and f"self.{attr}=" not in source:
            missing.append(f"{module_name}.{class_name}.{attr}")
    return missing


def config_problems(options: Any, vllm_version: str, pinned: str) -> list[str]:
    """Reasons, from the engine options alone, why re-anchoring cannot run; empty when it can."""
    problems = []
    if vllm_version.split("+")[0] != pinned:
        problems.append(f"vLLM {vllm_version} is not the pinned {pinned}")
    if _quantized_kv(str(options.kv_cache_dtype)):
        problems.append(
            f"KV cache dtype {options.kv_cache_dtype} is quantized: its keys cannot be rotated in place exactly"
        )
    if options.enable_prefix_caching:
        problems.append("prefix caching is on: rotated blocks would poison shared cache entries")
    if not 0 < options.reanchor_margin_tokens < options.max_model_len:
        problems.append(f"reanchor margin {options.reanchor_margin_tokens} must be in (0, max_model_len)")
    if missing := missing_attributes():
        problems.append("vLLM lacks what the extension relies on: " + ", ".join(missing))
    return problems


def _quantized_kv(kv_cache_dtype: str) -> bool:
    """vLLM's own predicate (fp8*, nvfp4*, *per_token_head, ...), so a new quantized dtype is refused too."""
    from vllm.utils.torch_utils import is_quantized_kv_cache

    return bool(is_quantized_kv_cache(kv_cache_dtype))


def _source(cls: type) -> str:
    try:
        return inspect.getsource(cls)
    except (OSError, TypeError):
        return ""
