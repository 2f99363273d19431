"""Engine options for the voxtral engine: one frozen dataclass, built from a plain dict (CLI flags, presets)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine_sidecar.engines.limits import ADMISSION_LAG, BACKLOG
from engine_sidecar.engines.voxtral.allocator import CHOICES as ALLOCATORS
from engine_sidecar.engines.voxtral.phrase_trie import PROCESSOR_V1, PROCESSOR_V2
from engine_sidecar.engines.voxtral.probes import Probes
from engine_sidecar.engines.voxtral.reanchor.settings import ReanchorSettings
from engine_sidecar.engines.voxtral.vllm_window.versions import Release, runs_v2

# Old option names still taken (--engine-option OLD=...): old name -> new name.
RENAMED = {"freeze_timeout_s": "stall_timeout_s"}
NO_PROBES = Probes()


@dataclass(frozen=True)
class VoxtralOptions:
    # vLLM engine (names follow vLLM's flags)
    max_model_len: int = 16384  # stock decoder window 8192 + room to re-anchor (KV is bounded by the window)
    max_num_seqs: int = 16
    max_num_batched_tokens: int | None = None  # None: max(512, 400 x max_num_seqs), see notes on blank ruts
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    gpu_memory_utilization: float = 0.9
    tensor_parallel_size: int = 1
    enforce_eager: bool | None = None  # None: eager on CPU, graphs on GPU
    cudagraph_mode: str | None = None  # e.g. "PIECEWISE"; None: vLLM's default
    enable_prefix_caching: bool = False  # rotated/rolled realtime KV must never be shared
    decoder_sliding_window: int | None = None  # hf_overrides text_config.sliding_window
    encoder_sliding_window: int | None = None  # hf_overrides audio_config.sliding_window
    block_size: int | None = None
    # RoPE re-anchoring (engine_sidecar/engines/voxtral/reanchor): unbounded sessions at constant memory
    reanchor: bool = True  # False, or a failed start-up guard: sessions roll over to fresh requests instead
    reanchor_margin_tokens: int = 128  # re-anchor once a session's clock reaches max_model_len - margin
    # Session behaviour
    rollover_margin_tokens: int = 4  # head-room kept below max_model_len besides the right padding
    rollover_silence_window_s: float = 60.0  # look for a VAD silence this long before the cap
    max_backlog_ms: int = BACKLOG.value  # audio pushed but not yet transcribed before push_audio waits
    admission_max_lag_ms: int = ADMISSION_LAG.value  # refuse new sessions while one lags real time more (0: off)
    rut_blank_frames: int = 200  # blank run over speech that counts as a rut (0: off)
    # The engine's stall watchdog: no output while audio is fed, for this long, restarts the session's request
    # (0: off). Every liveness check, and what it detects: docs/operating.md.
    stall_timeout_s: float = 10.0
    # Front ends per engine core (process/core_host.py): K AsyncLLM processes share one EngineCore, each with
    # 1/K of its capacity; a dead front end is replaced on one of `frontend_spares` spare client slots.
    frontends: int = 1
    frontend_spares: int = 4
    # malloc for vLLM's EngineCore and Worker (voxtral/allocator.py): "auto" tcmalloc on the CPU when the
    # system has it (glibc's heap fragments per token), "tcmalloc" anywhere (an error if absent), "system" glibc.
    allocator: str = "auto"
    # Start on a vLLM outside the verified window (vllm_window/versions.py), with re-anchoring off.
    allow_unlisted_vllm: bool = False
    # Bias decoding toward a session's phrase hints (a vLLM logits processor: phrase_bias.py on model runner V1,
    # phrase_bias_v2.py on V2). Off, or on an unlisted vLLM, the engine reports that it ignores hints.
    phrase_bias: bool = True

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None) -> VoxtralOptions:
        """Unknown keys are an error (a typo in a flag must not be silently ignored); '-' means '_'; an old
        name (RENAMED) means its new one."""
        if not values:
            return cls()
        names = {f.name: f for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in values.items():
            name = key.replace("-", "_")
            name = RENAMED.get(name, name)
            if name not in names:
                raise ValueError(f"unknown voxtral option {key!r}; known: {', '.join(sorted(names))}")
            if name in kwargs:
                raise ValueError(f"voxtral option {name!r} given twice (once as {key!r})")
            kwargs[name] = _typed(name, str(names[name].type), value)
        opts = cls(**kwargs)
        opts.validate()
        return opts

    def validate(self) -> None:
        if self.max_model_len < 128:
            raise ValueError("max_model_len must be >= 128 (prompt, right padding and some audio must fit)")
        if self.max_num_seqs < 1:
            raise ValueError("max_num_seqs must be >= 1")
        if not 0 < self.reanchor_margin_tokens < self.max_model_len:
            raise ValueError("reanchor_margin_tokens must be in (0, max_model_len)")
        if self.allocator not in ALLOCATORS:
            raise ValueError(f"allocator must be one of {', '.join(ALLOCATORS)}")
        if self.frontends < 1 or self.frontend_spares < 0:
            raise ValueError("frontends must be >= 1 and frontend_spares >= 0")
        if self.frontends > self.max_num_seqs:
            raise ValueError("frontends must be <= max_num_seqs (each front end admits max_num_seqs / frontends)")
        if self.max_backlog_ms < 1000:
            raise ValueError("max_backlog_ms must be >= 1000 (the model needs ~560 ms of look-ahead)")

    def model_dtype(self, on_cpu: bool) -> str:
        # On a CPU, "auto" means float32: measured here, 4 desynchronized sessions of the tiny model hold real
        # time through the public API in float32 and only just in bf16; and float32 makes tokens comparable
        # across runs. The CPU path serves development and CI; GPUs keep the checkpoint's bf16.
        return "float32" if on_cpu and self.dtype == "auto" else self.dtype

    def batched_tokens(self) -> int:
        # An encoder chunk split across steps makes blank-token ruts likelier: keep whole chunks in one step.
        return self.max_num_batched_tokens or max(512, 400 * self.max_num_seqs)

    def hf_overrides(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        if self.decoder_sliding_window:
            out["text_config"] = {"sliding_window": self.decoder_sliding_window}
        if self.encoder_sliding_window:
            out["audio_config"] = {"sliding_window": self.encoder_sliding_window}
        return out

    def reanchor_settings(self, probes: Probes = NO_PROBES) -> ReanchorSettings:
        return ReanchorSettings(
            margin_tokens=self.reanchor_margin_tokens,
            rotate_decoder=probes.reanchor_rotate != "none",
            rotate_encoder=probes.reanchor_rotate == "all",
            exact_rope_tables=probes.exact_rope_tables,
            precise_rope=probes.precise_rope,
        )

    def phrase_bias_processor(self, release: Release | None) -> str | None:
        """The phrase-hint logits processor vLLM loads (for its model runner), or None."""
        if not self.phrase_bias or release is None:
            return None
        return PROCESSOR_V2 if runs_v2(release) else PROCESSOR_V1

    def engine_kwargs(
        self,
        model: str,
        on_cpu: bool,
        reanchor: bool = False,
        probes: Probes = NO_PROBES,
        phrase_bias: str | None = None,
    ) -> dict[str, Any]:
        """Keyword arguments for vllm.AsyncEngineArgs; `reanchor` loads the re-anchoring extension, `phrase_bias`
        names the phrase-hint logits processor."""
        kwargs: dict[str, Any] = dict(
            model=model,
            tokenizer_mode="mistral",
            config_format="mistral",
            load_format="mistral",
            max_model_len=self.max_model_len,
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.batched_tokens(),
            dtype=self.model_dtype(on_cpu),
            kv_cache_dtype=self.kv_cache_dtype,
            tensor_parallel_size=self.tensor_parallel_size,
            enable_prefix_caching=self.enable_prefix_caching,
            # The multimodal receiver cache keeps every 80 ms frame of a session: memory would grow forever.
            mm_processor_cache_gb=0,
            enforce_eager=on_cpu if self.enforce_eager is None else self.enforce_eager,
            disable_log_stats=True,
            enable_log_requests=False,
        )
        if not on_cpu:
            kwargs["gpu_memory_utilization"] = self.gpu_memory_utilization
        if self.cudagraph_mode:
            kwargs["compilation_config"] = {"cudagraph_mode": self.cudagraph_mode}
        if self.block_size:
            kwargs["block_size"] = self.block_size
        if overrides := self.hf_overrides():
            kwargs["hf_overrides"] = overrides
        if reanchor or probes.reanchor_extension:
            # vLLM schedules synchronously on CPU and asynchronously on GPU by default. Ask for that explicitly
            # (vLLM then refuses an incompatible setting instead of resolving it quietly), subclass the matching
            # scheduler, and the scheduler checks the flag vLLM resolved at construction.
            kwargs["async_scheduling"] = not on_cpu
            scheduler = "ReanchorScheduler" if on_cpu else "ReanchorAsyncScheduler"
            kwargs["scheduler_cls"] = f"engine_sidecar.engines.voxtral.reanchor.scheduler.{scheduler}"
            kwargs["additional_config"] = self.reanchor_settings(probes).as_config()
        if phrase_bias:
            kwargs["logits_processors"] = [phrase_bias]
        # Always: its capacity query needs no vLLM internals (re-anchoring arms only when asked).
        kwargs["worker_extension_cls"] = "engine_sidecar.engines.voxtral.reanchor.worker.ReanchorWorkerExtension"
        return kwargs


TRUE, FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def _typed(name: str, annotation: str, value: Any) -> Any:
    """An option's value as its field's type: "False" from a command line must not count as true."""
    optional = annotation.endswith("| None")
    kind = annotation.removesuffix("| None").strip()
    if value is None and optional:
        return None
    text = value.strip().lower() if isinstance(value, str) else None
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if text in TRUE or text in FALSE:
            return text in TRUE
        raise ValueError(f"voxtral option {name} wants true or false, got {value!r}")
    if kind in ("int", "float") and not isinstance(value, bool):
        try:
            number = float(value) if kind == "float" else int(value)
        except (TypeError, ValueError):
            pass
        else:
            if kind == "float" or not isinstance(value, float) or value.is_integer():
                return number
        raise ValueError(f"voxtral option {name} wants a{'n integer' if kind == 'int' else ' number'}, got {value!r}")
    if kind == "str" and isinstance(value, str):
        return value
    if kind in ("int", "float", "str"):
        raise ValueError(f"voxtral option {name} wants {kind}, got {value!r}")
    return value
