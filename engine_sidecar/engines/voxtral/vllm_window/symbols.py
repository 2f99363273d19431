"""Every private piece of vLLM the voxtral engine relies on, by concern, with the releases that have it.

A row reads "module:Class.attribute(parameters)": the class (or function) must be defined in the module, the
attribute must be a method, class attribute, dataclass field or `self.attribute` set in the class or a vLLM
base class, and the named parameters must be the method's first parameters, in order. Rows for one release
only name it. Checked at start-up against the installed vLLM (installed.py) and for every release of the window
against its wheel's sources (tests/vllm_sources/). Public imports (`from vllm.x import Y`) are checked there
too, from the code itself, so they are not listed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine_sidecar.engines.voxtral.vllm_window.versions import RELEASES

ALL = tuple(RELEASES)
_ROW = re.compile(r"^(?P<module>[\w.]+):(?P<name>\w+)(?:\.(?P<attr>\w+))?(?:\((?P<params>[\w, *]*)\))?$")


@dataclass(frozen=True)
class Symbol:
    module: str
    name: str  # a class or function of the module
    attr: str = ""  # an attribute of the class ("": the name itself)
    params: tuple[str, ...] | None = None  # its first parameters (without self), in order; None: not checked
    releases: tuple[str, ...] = ALL
    concern: str = ""

    @classmethod
    def parse(cls, row: str, concern: str, releases: tuple[str, ...] = ALL) -> Symbol:
        match = _ROW.match(row)
        if match is None:
            raise ValueError(f"not a symbol row: {row!r}")
        raw = match["params"]
        params = None if raw is None else tuple(p.strip() for p in raw.split(",") if p.strip())
        return cls(match["module"], match["name"], match["attr"] or "", params, releases, concern)

    def __str__(self) -> str:
        where = f"{self.module}.{self.name}" + (f".{self.attr}" if self.attr else "")
        return where + (f"({', '.join(self.params)})" if self.params is not None else "")


def _rows(concern: str, rows: str, releases: tuple[str, ...] = ALL) -> tuple[Symbol, ...]:
    return tuple(Symbol.parse(r.strip(), concern, releases) for r in rows.strip().splitlines() if r.strip())


SCHED = "vllm.v1.core.sched.scheduler:Scheduler"
SINGLE = "vllm.v1.core.single_type_kv_cache_manager"
REQUEST = "vllm.v1.request:Request"

# The scheduler subclass that shifts a session's clock (reanchor/scheduler.py).
SCHEDULER = _rows(
    "scheduler",
    f"""
    {SCHED}._update_request_as_session(session, update)
    {SCHED}.schedule
    {SCHED}.requests
    {SCHED}.vllm_config
    {SCHED}.kv_cache_manager
    {SCHED}.encoder_cache_manager
    {SCHED}.max_model_len
    vllm.v1.core.sched.async_scheduler:AsyncScheduler._update_after_schedule
    vllm.v1.core.kv_cache_manager:KVCacheManager.coordinator
    vllm.v1.core.kv_cache_coordinator:KVCacheCoordinator.single_type_managers
    {SINGLE}:SingleTypeKVCacheManager.req_to_blocks
    {SINGLE}:SingleTypeKVCacheManager.num_cached_block
    {SINGLE}:SingleTypeKVCacheManager._null_block
    {SINGLE}:SingleTypeKVCacheManager.block_pool
    {SINGLE}:SingleTypeKVCacheManager.block_size
    {SINGLE}:SlidingWindowManager.get_num_skipped_tokens(num_computed_tokens)
    vllm.v1.core.encoder_cache_manager:EncoderCacheManager.request_cached_ids
    vllm.v1.core.encoder_cache_manager:EncoderCacheManager.free_encoder_input(request, input_id)
    vllm.v1.core.block_pool:BlockPool.free_blocks(ordered_blocks)
    {REQUEST}._all_token_ids
    {REQUEST}.prompt_token_ids
    {REQUEST}.num_prompt_tokens
    {REQUEST}.num_computed_tokens
    {REQUEST}.num_tokens
    {REQUEST}.num_in_flight_tokens
    {REQUEST}.num_stale_output_tokens
    {REQUEST}.num_output_placeholders
    {REQUEST}.spec_token_ids
    {REQUEST}.block_hashes
    {REQUEST}.mm_features
    {REQUEST}.sampling_params
    {REQUEST}.client_index
    vllm.multimodal.inputs:MultiModalFeatureSpec.mm_position
    vllm.multimodal.inputs:PlaceholderRange.offset
    vllm.multimodal.inputs:PlaceholderRange.length
    vllm.sampling_params:SamplingParams.extra_args
    vllm.engine.arg_utils:EngineArgs.scheduler_cls
    vllm.engine.arg_utils:EngineArgs.worker_extension_cls
    vllm.engine.arg_utils:EngineArgs.additional_config
    """,
)

# The EngineCore calls the plugin adds (reanchor/engine_core.py, core_calls.py) and how the sidecar calls them.
ENGINE_CORE = _rows(
    "engine core",
    """
    vllm.v1.engine.core:EngineCore.scheduler
    vllm.v1.engine.core:EngineCore.collective_rpc(method, timeout, args, kwargs)
    vllm.v1.engine.core:EngineCore.abort_requests(request_ids)
    vllm.v1.engine.core_client:AsyncMPClient.call_utility_async(method)
    vllm.v1.engine.async_llm:AsyncLLM.collective_rpc(method, timeout, args, kwargs)
    vllm.v1.engine.async_llm:AsyncLLM.engine_core
    vllm.v1.worker.worker_base:WorkerWrapperBase.init_worker(all_kwargs)
    vllm.plugins:load_general_plugins
    """,
)


def _attrs(cls: str, names: str) -> str:
    """One row per attribute of a class (`names` space-separated)."""
    return "\n".join(f"{cls}.{a}" for a in names.split())


RUNNER_READS = "kv_cache_config compilation_config vllm_config model_config get_model"  # V1 and V2 alike
ASYNC_LLM = "vllm.v1.engine.async_llm:AsyncLLM"
FRONT_END_READS = "_add_request _run_output_handler input_processor output_processor output_handler errored log_stats"


CPU_ATTN = "vllm.v1.attention.backends.cpu_attn:CPUAttentionBackendImpl"
FLASH_ATTN = "vllm.v1.attention.backends.flash_attn:FlashAttentionImpl"
KV_UPDATE = "layer, key, value, kv_cache, slot_mapping"  # the layout probe calls the backend's own cache write

# The worker extension that rotates cached keys (reanchor/worker.py, rotator.py, vllm_window/worker.py).
WORKER = _rows(
    "worker",
    f"""
    vllm.v1.worker.gpu_worker:Worker.model_runner
    vllm.v1.worker.cpu_worker:CPUWorker.model_runner
    {_attrs("vllm.v1.worker.gpu.model_runner:GPUModelRunner", RUNNER_READS)}
    vllm.config.compilation:CompilationConfig.static_forward_context
    {_attrs("vllm.v1.core.sched.output:NewRequestData", "prefill_token_ids num_computed_tokens block_ids")}
    vllm.v1.kv_cache_interface:KVCacheConfig.num_blocks
    vllm.v1.kv_cache_interface:KVCacheConfig.kv_cache_groups
    vllm.v1.kv_cache_interface:KVCacheGroupSpec.layer_names
    vllm.v1.kv_cache_interface:KVCacheGroupSpec.kv_cache_spec
    vllm.v1.kv_cache_interface:SlidingWindowSpec.sliding_window
    vllm.v1.kv_cache_interface:SlidingWindowSpec.block_size
    vllm.v1.kv_cache_interface:SlidingWindowSpec.num_kv_heads
    vllm.v1.kv_cache_interface:SlidingWindowSpec.head_size
    vllm.v1.kv_cache_interface:is_quantized_kv_cache(kv_cache_dtype)
    vllm.model_executor.layers.attention.attention:Attention.kv_cache
    vllm.model_executor.layers.attention.attention:Attention.impl
    vllm.model_executor.layers.attention.attention:Attention.layer_name
    {CPU_ATTN}.do_kv_cache_update({KV_UPDATE})
    {FLASH_ATTN}.do_kv_cache_update({KV_UPDATE})
    vllm.model_executor.layers.rotary_embedding.base:RotaryEmbedding.cos_sin_cache
    vllm.model_executor.layers.rotary_embedding.base:RotaryEmbedding.head_size
    vllm.model_executor.layers.rotary_embedding.base:RotaryEmbedding.rotary_dim
    vllm.model_executor.layers.rotary_embedding.base:RotaryEmbedding.base
    vllm.model_executor.layers.rotary_embedding.base:RotaryEmbedding.is_neox_style
    vllm.model_executor.custom_op:CustomOp._forward_method
    vllm.model_executor.models.whisper_causal:WhisperCausalAttentionWithBlockPooling.block_pool_size
    """,
) + _rows(
    "worker (model runner V1, where it exists)",
    f"""
    {_attrs("vllm.v1.worker.gpu_model_runner:GPUModelRunner", RUNNER_READS)}
    vllm.v1.worker.cpu_model_runner:CPUModelRunner
    """,
    ("0.32", "0.33"),
)

# The front end: the realtime buffer re-anchoring uncaps, and the step driver's use of AsyncLLM's internals.
FRONT_END = _rows(
    "front end",
    f"""
    vllm.model_executor.models.voxtral_realtime:VoxtralRealtimeBuffer.__init__(config, prompt_tokens, max_model_len)
    vllm.model_executor.models.voxtral_realtime:VoxtralRealtimeGeneration.buffer_realtime_audio
    {ASYNC_LLM}._validate_streaming_input_sampling_params(params)
    {_attrs(ASYNC_LLM, FRONT_END_READS)}
    vllm.v1.engine.output_processor:RequestOutputCollector.put(output)
    vllm.v1.engine.output_processor:OutputProcessor.request_states
    vllm.v1.engine.output_processor:OutputProcessor.log_stats
    vllm.v1.engine.detokenizer:IncrementalDetokenizer.token_ids
    """,
)

# Phrase hints: the logits processors (phrase_bias.py on model runner V1, phrase_bias_v2.py on V2) and the per-step
# params that carry a session's phrases.
V1_PROCS = "vllm.v1.sample.logits_processor"
V2_PROCS = "vllm.v1.worker.gpu.sample.logits_processor.interface"
PHRASE_HINTS = _rows(
    "phrase hints (model runner V1)",
    f"""
    {V1_PROCS}:LogitsProcessor.__init__(vllm_config, device, is_pin_memory)
    {V1_PROCS}:LogitsProcessor.update_state(batch_update)
    {V1_PROCS}:LogitsProcessor.apply(logits)
    {V1_PROCS}:LogitsProcessor.is_argmax_invariant
    {V1_PROCS}.builtin:process_dict_updates(req_entries, batch_update, new_state)
    vllm.v1.worker.gpu_input_batch:InputBatch.batch_update_builder
    """,
    ("0.32", "0.33"),
) + _rows(
    "phrase hints",
    f"""
    {V2_PROCS}:LogitsProcessor.__init__(vllm_config, req_states)
    {V2_PROCS}:LogitsProcessor.add_request(req_idx, sampling_params)
    {V2_PROCS}:LogitsProcessor.apply(logits, ctx)
    {V2_PROCS}:LogitsProcRequestState.all_token_ids
    {V2_PROCS}:LogitsProcRequestState.total_len
    {V2_PROCS}:LogitsContext.idx_mapping_np
    vllm.v1.worker.gpu.buffer_utils:StagedWriteTensor.gpu
    vllm.engine.arg_utils:EngineArgs.logits_processors
    vllm.engine.protocol:StreamingInput.sampling_params
    vllm.sampling_params:SamplingParams.extra_args
    """,
)

SYMBOLS: tuple[Symbol, ...] = SCHEDULER + ENGINE_CORE + WORKER + FRONT_END + PHRASE_HINTS
REANCHOR_CONCERNS = ("scheduler", "engine core", "worker", "worker (model runner V1, where it exists)")


def for_release(release: str, concerns: tuple[str, ...] | None = None) -> tuple[Symbol, ...]:
    return tuple(s for s in SYMBOLS if release in s.releases and (concerns is None or s.concern in concerns))
