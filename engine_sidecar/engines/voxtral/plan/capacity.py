"""KV memory per live stream and how many streams a GPU holds, for Voxtral realtime on vLLM.

A stream has two KV groups, both sliding-window, both counted in *scheduler tokens* (decoder tokens,
80 ms each), because vLLM's KV manager tracks one token count per request:

- decoder: per token and layer 2 (K, V) × kv_heads × head_dim × dtype bytes.
- encoder: vLLM's causal Whisper attention pools `pool = downsample_factor` encoder states into one
  scheduler slot (`WhisperCausalAttentionWithBlockPooling.get_kv_cache_spec` multiplies num_kv_heads by
  block_pool_size; its backend stretches each block by pool and maps slot s to states pool·s + j). That is
  the notes' "encoder positions are pos·pool + j": one decoder token carries `pool` encoder states, so per
  scheduler token and layer an encoder layer holds 2 × pool × kv_heads × head_dim × dtype bytes.

Tokens held (vLLM `SlidingWindowSpec.max_memory_usage_bytes`, also the steady state of
`SlidingWindowManager`): min(window − 1 + tokens scheduled in the step, max_model_len), rounded up to
whole blocks, **+1 block** because the window rarely starts on a block boundary. A realtime stream
schedules one token per 80 ms step.

Two accountings (`Layout`):

- "vllm" (default; what vLLM actually allocates and therefore what limits streams):
  * the encoder layers' KV spec keeps vLLM's generic `sliding_window` = the encoder window as written in
    params.json (750), but the manager applies it to scheduler tokens, so it holds 750 decoder tokens =
    3000 encoder states although attention only reads the last 750 states (188 tokens): 4× over-holding;
  * page sizes are unified: the group with the smaller page (decoder) gets its block size multiplied
    until pages match (real model: decoder blocks of 8·block_size, encoder blocks of block_size; the
    notes' "(8·bs, bs)", and "(512, 128)" for the tiny model at block size 128);
  * groups are padded to a common layer count (`_get_kv_cache_groups_uniform_page_size`: group size = the
    smallest per-type layer count, or the largest when it is < 1.25× the smallest): real model 26 decoder
    and 32 encoder layers → group size 32, the decoder group costs 32 layers.
- "exact": what the model itself needs with paged blocks of block_size: own layer counts, encoder window
  ceil(window / pool) tokens. Shown as the floor a fixed vLLM could reach.

Memory: kv budget = GPU memory × gpu_memory_utilization − weights − reserve, where `reserve` is everything
vLLM's profiler finds besides weights and KV (CUDA context and library workspaces, the profiling run's peak
activations for max_num_batched_tokens and the encoder's dummy audio, CUDA graphs); it is an explicit
parameter because it can only be measured on the card. max streams = floor(budget / KV per stream),
capped by max_num_seqs. (vLLM also keeps one null block; it is inside the reserve.)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

from engine_sidecar.engines.voxtral.plan.params import VoxtralParams, dtype_bytes

Layout = Literal["vllm", "exact"]
KIB, MIB, GIB, TIB = 1 << 10, 1 << 20, 1 << 30, 1 << 40
DEFAULT_BLOCK_SIZE = 16  # vLLM's default KV block size on CUDA
_UNITS = {"": 1, "b": 1, "k": KIB, "m": MIB, "g": GIB, "t": TIB}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """'16GiB', '16GB', '80G', '24576MiB', '15.5GiB', '1073741824' → bytes.

    GPU memory is sold in binary units (a "16 GB" card has 16 GiB; nvidia-smi shows MiB), so GB, G and GiB
    all mean 2**30 here, MB/M/MiB 2**20, and so on.
    """
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"not a size: {text!r} (examples: 16GiB, 16GB, 80G, 24576MiB)")
    number, unit, suffix = match.groups()
    if suffix and suffix.lower() == "ib" and not unit:
        raise ValueError(f"not a size: {text!r}")
    value = float(number) * _UNITS[unit.lower()]
    if value < 1 and float(number) != 0:
        raise ValueError(f"size too small: {text!r}")
    return int(value)


def format_size(n: int) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def blocks_held(window: int, block_size: int, max_model_len: int, tokens_per_step: int = 1) -> int:
    """KV blocks one stream holds in a sliding-window group in steady state: min(window - 1 + tokens scheduled
    in the step, max_model_len) tokens in whole blocks, +1 because the window rarely starts on a block boundary
    (module doc). A full-attention group is a window of max_model_len. The one formula: the sidecar's admission
    (engine_sidecar/engines/voxtral/admission.py) counts the sessions its KV pool holds with it too."""
    held = min(window - 1 + tokens_per_step, max_model_len)
    return -(-held // block_size) + 1


@dataclass(frozen=True)
class KVGroup:
    """One KV-cache group as the block manager sees it."""

    name: str  # "decoder" | "encoder"
    layers: int  # layers whose blocks a stream pays for (vLLM layout: including padding layers)
    kv_heads: int  # per scheduler token: decoder n_kv_heads; encoder pool × n_kv_heads
    head_dim: int
    window: int  # tokens the manager keeps, in scheduler (decoder) tokens
    block_size: int  # scheduler tokens per block
    dtype_bytes: int

    @property
    def bytes_per_token(self) -> int:
        return self.layers * 2 * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def block_bytes(self) -> int:
        return self.block_size * self.bytes_per_token

    def blocks_per_stream(self, max_model_len: int, tokens_per_step: int = 1) -> int:
        return blocks_held(self.window, self.block_size, max_model_len, tokens_per_step)

    def bytes_per_stream(self, max_model_len: int, tokens_per_step: int = 1) -> int:
        return self.blocks_per_stream(max_model_len, tokens_per_step) * self.block_bytes


def _group_size(layer_counts: tuple[int, ...]) -> int:
    smallest, largest = min(layer_counts), max(layer_counts)
    return largest if largest < smallest * 1.25 else smallest


def kv_groups(
    params: VoxtralParams,
    decoder_window: int | None = None,
    encoder_window: int | None = None,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    kv_cache_dtype: str = "auto",
    layout: Layout = "vllm",
) -> tuple[KVGroup, KVGroup]:
    """The decoder and encoder KV groups for the given windows (None: the checkpoint's own)."""
    if block_size <= 0:
        raise ValueError("block_size must be positive")
    dec_w = params.decoder_window if decoder_window is None else decoder_window
    enc_w = params.encoder_window if encoder_window is None else encoder_window
    if dec_w <= 0 or enc_w <= 0:
        raise ValueError("windows must be positive")
    nbytes = params.dtype_bytes if kv_cache_dtype == "auto" else dtype_bytes(kv_cache_dtype)
    pool = params.downsample_factor
    dec_heads, enc_heads = params.decoder_kv_heads, pool * params.encoder_kv_heads
    if layout == "exact":
        return (
            KVGroup("decoder", params.decoder_layers, dec_heads, params.decoder_head_dim, dec_w, block_size, nbytes),
            KVGroup(
                "encoder",
                params.encoder_layers,
                enc_heads,
                params.encoder_head_dim,
                -(-enc_w // pool),
                block_size,
                nbytes,
            ),
        )
    dec_page = block_size * 2 * dec_heads * params.decoder_head_dim * nbytes
    enc_page = block_size * 2 * enc_heads * params.encoder_head_dim * nbytes
    page = max(dec_page, enc_page)
    if page % dec_page or page % enc_page:
        raise ValueError(f"vLLM cannot unify KV page sizes {dec_page} and {enc_page} B")
    size = _group_size((params.decoder_layers, params.encoder_layers))

    def padded(layers: int) -> int:
        return -(-layers // size) * size

    return (
        KVGroup(
            "decoder",
            padded(params.decoder_layers),
            dec_heads,
            params.decoder_head_dim,
            dec_w,
            block_size * page // dec_page,
            nbytes,
        ),
        KVGroup(
            "encoder",
            padded(params.encoder_layers),
            enc_heads,
            params.encoder_head_dim,
            enc_w,
            block_size * page // enc_page,
            nbytes,
        ),
    )


@dataclass(frozen=True)
class GroupUsage:
    name: str
    window_tokens: int
    block_size: int
    layers: int
    blocks: int
    bytes: int


@dataclass(frozen=True)
class StreamKV:
    groups: tuple[GroupUsage, ...]

    @property
    def bytes(self) -> int:
        return sum(g.bytes for g in self.groups)

    @property
    def blocks(self) -> int:
        return sum(g.blocks for g in self.groups)


def stream_kv(groups: tuple[KVGroup, ...], max_model_len: int, tokens_per_step: int = 1) -> StreamKV:
    """KV one live stream holds in steady state."""
    if max_model_len <= 0 or tokens_per_step <= 0:
        raise ValueError("max_model_len and tokens_per_step must be positive")
    return StreamKV(
        tuple(
            GroupUsage(
                g.name,
                g.window,
                g.block_size,
                g.layers,
                g.blocks_per_stream(max_model_len, tokens_per_step),
                g.bytes_per_stream(max_model_len, tokens_per_step),
            )
            for g in groups
        )
    )


def parameter_count(p: VoxtralParams) -> int:
    """Weight matrices of the checkpoint (norms and biases, <0.01 %, left out)."""
    dec_layer = (
        p.decoder_dim * p.decoder_head_dim * (p.decoder_heads + 2 * p.decoder_kv_heads)
        + p.decoder_heads * p.decoder_head_dim * p.decoder_dim
        + 3 * p.decoder_dim * p.decoder_hidden_dim  # SwiGLU w1, w2, w3
        + 2 * p.decoder_dim * p.ada_cond_dim
    )  # ada-RMSNorm t-conditioning: dim→cond→dim
    embeddings = p.vocab_size * p.decoder_dim * (1 if p.tied_embeddings else 2)
    enc_layer = (
        p.encoder_dim * p.encoder_head_dim * (p.encoder_heads + 2 * p.encoder_kv_heads)
        + p.encoder_heads * p.encoder_head_dim * p.encoder_dim
        + 3 * p.encoder_dim * p.encoder_hidden_dim
    )
    conv_stem = 3 * p.num_mel_bins * p.encoder_dim + 3 * p.encoder_dim * p.encoder_dim
    adapter = p.downsample_factor * p.encoder_dim * p.decoder_dim + p.decoder_dim * p.decoder_dim
    return embeddings + p.decoder_layers * dec_layer + p.encoder_layers * enc_layer + conv_stem + adapter


def weight_bytes_estimate(p: VoxtralParams) -> int:
    return parameter_count(p) * p.dtype_bytes


@dataclass(frozen=True)
class Budget:
    gpu_bytes: int
    gpu_memory_utilization: float
    weight_bytes: int
    reserve_bytes: int

    @property
    def usable_bytes(self) -> int:
        return math.floor(self.gpu_bytes * self.gpu_memory_utilization)

    @property
    def kv_bytes(self) -> int:
        return max(0, self.usable_bytes - self.weight_bytes - self.reserve_bytes)


def max_streams(budget: Budget, per_stream_bytes: int, max_num_seqs: int | None = None) -> int:
    """floor(KV budget / KV per stream), capped by max_num_seqs."""
    if per_stream_bytes <= 0:
        raise ValueError("per_stream_bytes must be positive")
    streams = budget.kv_bytes // per_stream_bytes
    return streams if max_num_seqs is None else min(streams, max_num_seqs)
