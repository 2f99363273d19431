"""Named vLLM engine presets for Voxtral realtime: `16gb` and `datacenter`.

`--preset NAME` (on `voxgate serve`, which passes it on, and on the sidecar) expands into the engine's options
and environment inside the sidecar (flags.py), and `voxgate plan` sizes it (plan/).

A preset is the whole set of engine settings that matter for realtime serving; `engine_kwargs()` is what
goes into vLLM's engine args, `vllm_flags()` the same as `vllm serve` flags, `serve_flags()` the
`voxgate serve` flags. Settings common to both (and why):

- enable_prefix_caching False: a live session never shares a prefix, and re-anchoring rotates cached keys
  in place — a shared/hashed block would be poisoned (notes: reanchor-map pitfall 3).
- cudagraph_mode PIECEWISE: the model rejects full CUDA graphs; piecewise graphs keep decode fast.
- kv_cache_dtype "auto" (= bf16): re-anchoring refuses fp8 KV (rotating would need dequantise → rotate →
  requantise), and fp8 would not halve the dominant encoder KV on every backend anyway.
- mm_processor_cache_gb 0: vLLM's multimodal receiver cache otherwise keeps every 80 ms frame of a session
  (up to 4 GiB, ~11–14 KB per token): memory must stay flat.
- env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: less fragmentation, one of the levers against the
  16 GB boot OOM.
- max_num_batched_tokens ≥ 400 × max_num_seqs (and ≥ 512): an encoder chunk (~390 tokens) split across
  steps makes the blank-token rut (#47614) more likely; this lets every stream's chunk land in one step.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, replace
from typing import Any

MIN_BATCHED_TOKENS = 512
BATCHED_TOKENS_PER_SEQ = 400
EXPANDABLE_SEGMENTS = ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
GIB = 1 << 30


@dataclass(frozen=True)
class EnginePreset:
    name: str
    description: str
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    decoder_window: int | None  # hf_overrides text_config.sliding_window; None keeps the checkpoint's
    encoder_window: int | None  # hf_overrides audio_config.sliding_window
    gpu_memory_utilization: float
    reserve_bytes: int  # planner only: non-KV, non-weight memory (context, activations, graphs); see capacity.py
    kv_cache_dtype: str = "auto"
    cudagraph_mode: str = "PIECEWISE"
    enable_prefix_caching: bool = False
    mm_processor_cache_gb: float = 0.0
    tensor_parallel_size: int = 1
    env: tuple[tuple[str, str], ...] = (EXPANDABLE_SEGMENTS,)

    def with_windows(self, decoder: int | None, encoder: int | None) -> EnginePreset:
        return replace(self, decoder_window=decoder, encoder_window=encoder)

    def with_max_num_seqs(self, n: int) -> EnginePreset:
        """Another concurrency, keeping max_num_batched_tokens ≥ max(512, 400 × n)."""
        if n <= 0:
            raise ValueError("max_num_seqs must be positive")
        tokens = max(self.max_num_batched_tokens, BATCHED_TOKENS_PER_SEQ * n, MIN_BATCHED_TOKENS)
        return replace(self, max_num_seqs=n, max_num_batched_tokens=tokens)

    def hf_overrides(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.decoder_window is not None:
            out["text_config"] = {"sliding_window": self.decoder_window}
        if self.encoder_window is not None:
            out["audio_config"] = {"sliding_window": self.encoder_window}
        return out

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    def engine_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for vLLM's `AsyncEngineArgs` (model, tokenizer mode etc. are the caller's)."""
        kwargs: dict[str, Any] = {
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_model_len": self.max_model_len,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "kv_cache_dtype": self.kv_cache_dtype,
            "enable_prefix_caching": self.enable_prefix_caching,
            "compilation_config": {"cudagraph_mode": self.cudagraph_mode},
            "mm_processor_cache_gb": self.mm_processor_cache_gb,
            "tensor_parallel_size": self.tensor_parallel_size,
        }
        if overrides := self.hf_overrides():
            kwargs["hf_overrides"] = overrides
        return kwargs

    def vllm_flags(self) -> list[str]:
        flags = [
            "--max-num-seqs",
            str(self.max_num_seqs),
            "--max-num-batched-tokens",
            str(self.max_num_batched_tokens),
            "--max-model-len",
            str(self.max_model_len),
            "--gpu-memory-utilization",
            f"{self.gpu_memory_utilization:g}",
            "--kv-cache-dtype",
            self.kv_cache_dtype,
            "--enable-prefix-caching" if self.enable_prefix_caching else "--no-enable-prefix-caching",
            "--compilation-config",
            json.dumps({"cudagraph_mode": self.cudagraph_mode}),
            "--mm-processor-cache-gb",
            f"{self.mm_processor_cache_gb:g}",
            "--tensor-parallel-size",
            str(self.tensor_parallel_size),
        ]
        if overrides := self.hf_overrides():
            flags += ["--hf-overrides", json.dumps(overrides, separators=(",", ":"))]
        return flags

    def serve_flags(self) -> list[str]:
        flags = [
            "--preset",
            self.name,
            "--max-num-seqs",
            str(self.max_num_seqs),
            "--max-model-len",
            str(self.max_model_len),
            "--max-num-batched-tokens",
            str(self.max_num_batched_tokens),
        ]
        if self.decoder_window is not None:
            flags += ["--decoder-window", str(self.decoder_window)]
        if self.encoder_window is not None:
            flags += ["--encoder-window", str(self.encoder_window)]
        return flags + [
            "--gpu-memory-utilization",
            f"{self.gpu_memory_utilization:g}",
            "--kv-cache-dtype",
            self.kv_cache_dtype,
        ]

    def env_prefix(self) -> str:
        return " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env)


# The published LinTO recipe for 16 GB cards (RTX 4090 Laptop: 4 streams × 4.7 h, VRAM flat).
PRESET_16GB = EnginePreset(
    name="16gb",
    description="one 16 GB card (LinTO recipe): 4 streams, windows 512/256",
    # max_num_seqs = target concurrency (LinTO ran 4): vLLM profiles and captures graphs for this many, not 256.
    max_num_seqs=4,
    # ≥ 400 × 4 = 1600 and ≥ 512; 2048 is vLLM's usual chunked-prefill budget, so profiling stays modest.
    max_num_batched_tokens=2048,
    # Bounded: the encoder's profiling budget is sized from max_model_len (a boot-OOM cause at 131072).
    # 8192 tokens = 10.9 min per engine request; longer sessions are re-anchored (or rolled over), and
    # 8192 − 512 leaves more than the RFC's 4096-token re-anchor margin.
    max_model_len=8192,
    # 512/256: ≈0.6 % transcript change for ≈3.3× KV headroom in the LinTO measurements; a 256 decoder window
    # is where transcripts break, so 512 is the narrowest safe decoder window.
    decoder_window=512,
    encoder_window=256,
    # 0.90 (vLLM's default): a 16 GB card often drives a display or shares the box; leave 1.6 GiB outside vLLM.
    gpu_memory_utilization=0.90,
    # CUDA context + cuBLAS/attention workspaces (~0.6 GiB), profiling peak (encoder over 8192 tokens of dummy
    # audio = 32768 states, SwiGLU intermediate ≈ 0.7 GiB), PIECEWISE graphs for ≤ 4 seqs (~0.2 GiB), slack.
    reserve_bytes=2 * GIB,
)

# An 80 GB-class card (A100/H100 80 GB) serving a fleet share.
PRESET_DATACENTER = EnginePreset(
    name="datacenter",
    description="one 80 GB-class card: 64 streams, windows 1024/512",
    # 64 streams: one decode step of a ~4.4B model for 64 sequences (plus 64 × 8 encoder states) takes well
    # under the 80 ms each stream allows on an A100/H100, so compute keeps real time; past ~64 the step time
    # approaches the 80 ms frame and streams start to lag. Memory admits ~90 at 1024/512 (see `voxgate plan`),
    # so the cap is compute, and there is headroom if the reserve estimate is low.
    max_num_seqs=64,
    # exactly 400 × 64: a burst of 64 sessions starting together (e.g. after a sidecar restart) still gets
    # every first encoder chunk into one step.
    max_num_batched_tokens=25600,
    # 32768 tokens = 43.7 min per engine request: 4× fewer re-anchors/rollovers than 16gb; its profiling
    # peak (encoder over 131072 dummy states ≈ 2.7 GiB transient) is affordable on 80 GB.
    max_model_len=32768,
    # 1024/512: twice the 16gb windows — closer to stock (the LinTO window topologies all stayed within
    # 0.00–1.14 % transcript difference) — yet KV per stream is ~0.66 GiB instead of ~1.77 GiB at stock
    # (the encoder window dominates: vLLM holds 1 MiB per scheduler token of encoder window).
    decoder_window=1024,
    encoder_window=512,
    # 0.92: a dedicated, display-less card; expandable_segments keeps fragmentation low. Leaves ~6.4 GiB.
    gpu_memory_utilization=0.92,
    # context + workspaces (~0.8 GiB), profiling peak for 25600 batched tokens (decoder SwiGLU ≈ 0.9 GiB,
    # encoder ≈ 2.1 GiB) or the 2.7 GiB encoder dummy, PIECEWISE graphs up to 128 tokens (~0.5 GiB), slack.
    reserve_bytes=6 * GIB,
)

PRESETS: dict[str, EnginePreset] = {p.name: p for p in (PRESET_16GB, PRESET_DATACENTER)}


def get_preset(name: str) -> EnginePreset:
    try:
        return PRESETS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}") from None
