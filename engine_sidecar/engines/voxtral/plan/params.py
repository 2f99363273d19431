"""The dimensions of a Voxtral-realtime checkpoint that decide memory, read from Mistral's params.json.

Layout (Mistral format; vLLM's `transformers_utils/configs/mistral.py::_remap_mistral_audio_args`
reads the same keys): decoder keys at the top level, the causal audio encoder under
`multimodal.whisper_model_args.encoder_args`, and the block-pooling factor under
`multimodal.whisper_model_args.downsample_args.downsample_factor` (vLLM sets
`block_pool_size = downsample_factor` when `encoder_args.causal` is true).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HUB_ID = "mistralai/Voxtral-Mini-4B-Realtime-2602"

_DTYPE_BYTES = {
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "float32": 4,
    "fp32": 4,
    "float": 4,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
}


class ParamsError(ValueError):
    """params.json is missing, unreadable, or lacks a key that matters."""


@dataclass(frozen=True)
class VoxtralParams:
    # decoder (the language model)
    decoder_layers: int
    decoder_dim: int
    decoder_heads: int
    decoder_kv_heads: int
    decoder_head_dim: int
    decoder_hidden_dim: int
    decoder_window: int  # sliding window, decoder tokens (1 token = 80 ms)
    vocab_size: int
    tied_embeddings: bool
    ada_cond_dim: int  # `ada_rms_norm_t_cond_dim`, 0 when the model has no ada-RMSNorm
    # causal audio encoder
    encoder_layers: int
    encoder_dim: int
    encoder_heads: int
    encoder_kv_heads: int
    encoder_head_dim: int
    encoder_hidden_dim: int
    encoder_window: int  # sliding window, encoder positions (pos·pool + j)
    num_mel_bins: int
    downsample_factor: int  # encoder states per decoder token = vLLM's block_pool_size
    dtype: str = "bfloat16"  # weights; Mistral realtime checkpoints ship bf16
    max_position: int = 131072  # `model_max_length`

    @property
    def dtype_bytes(self) -> int:
        return dtype_bytes(self.dtype)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# Voxtral-Mini-4B-Realtime-2602 as published (params.json of the hub repo, as quoted verbatim by public
# re-implementations that parse it, e.g. a Rust port's `test_parse_actual_params_json`). Notes facts it agrees with:
# decoder ≈3.4B with window 8192, head_dim 128; encoder ≈970M, causal, window 750, head_dim 64; 4× downsample.
# Top level: dim 3072, n_layers 26, head_dim 128, hidden_dim 9216, n_heads 32, n_kv_heads 8, vocab 131072,
#   tied_embeddings true, sliding_window 8192, model_max_length 131072, ada_rms_norm_t_cond_dim 32.
# encoder_args: dim 1280, n_layers 32, head_dim 64, hidden_dim 5120, n_heads 32, n_kv_heads 32 (plain MHA),
#   causal true, pos_embed rope, sliding_window 750, num_mel_bins 128; downsample_factor 4.
# Cross-check: encoder 32 × (1280·64·(32+64) + 32·64·1280 + 3·1280·5120) + conv stem 128·1280·3 + 1280·1280·3
#   = 970,096,640 parameters (the published 970M); decoder 26 layers + tied embeddings ≈ 3.434B (the published 3.4B).
# No `dtype` key is published; the weights are bf16.
VOXTRAL_MINI_4B_REALTIME = VoxtralParams(
    decoder_layers=26,
    decoder_dim=3072,
    decoder_heads=32,
    decoder_kv_heads=8,
    decoder_head_dim=128,
    decoder_hidden_dim=9216,
    decoder_window=8192,
    vocab_size=131072,
    tied_embeddings=True,
    ada_cond_dim=32,
    encoder_layers=32,
    encoder_dim=1280,
    encoder_heads=32,
    encoder_kv_heads=32,
    encoder_head_dim=64,
    encoder_hidden_dim=5120,
    encoder_window=750,
    num_mel_bins=128,
    downsample_factor=4,
    dtype="bfloat16",
    max_position=131072,
)


def dtype_bytes(name: str) -> int:
    try:
        return _DTYPE_BYTES[name.lower().removeprefix("torch.")]
    except KeyError:
        raise ParamsError(f"unknown dtype {name!r}; known: {', '.join(sorted(_DTYPE_BYTES))}") from None


def _int(section: Mapping[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = section.get(key, default)
    if value is None:
        raise ParamsError(f"params.json: missing {where}{key}")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ParamsError(f"params.json: {where}{key} must be a non-negative integer, got {value!r}")
    return value


def parse_params(raw: Mapping[str, Any]) -> VoxtralParams:
    """Map a Mistral-format params.json (already decoded) to the dimensions that matter."""
    try:
        whisper = raw["multimodal"]["whisper_model_args"]
        enc = whisper["encoder_args"]
        pool_section = whisper["downsample_args"]
    except (KeyError, TypeError):
        raise ParamsError(
            "params.json: not a Voxtral checkpoint (needs multimodal.whisper_model_args.encoder_args "
            "and .downsample_args)"
        ) from None
    if not enc.get("causal", False):
        raise ParamsError("params.json: encoder_args.causal is not true: this is offline Voxtral, not realtime")
    w = "multimodal.whisper_model_args.encoder_args."
    dim = _int(raw, "dim", "")
    heads = _int(raw, "n_heads", "")
    enc_dim = _int(enc, "dim", w)
    enc_heads = _int(enc, "n_heads", w)
    mel = enc.get("audio_encoding_args", {}).get("num_mel_bins", 128)
    dtype = str(raw.get("dtype", raw.get("torch_dtype", "bfloat16")))
    dtype_bytes(dtype)  # reject an unknown dtype here, not later
    params = VoxtralParams(
        decoder_layers=_int(raw, "n_layers", ""),
        decoder_dim=dim,
        decoder_heads=heads,
        decoder_kv_heads=_int(raw, "n_kv_heads", "", default=heads),
        decoder_head_dim=_int(raw, "head_dim", "", default=dim // max(heads, 1)),
        decoder_hidden_dim=_int(raw, "hidden_dim", ""),
        decoder_window=_int(raw, "sliding_window", ""),
        vocab_size=_int(raw, "vocab_size", ""),
        tied_embeddings=bool(raw.get("tied_embeddings", False)),
        ada_cond_dim=_int(raw, "ada_rms_norm_t_cond_dim", "", default=0) if raw.get("ada_rms_norm_t_cond") else 0,
        encoder_layers=_int(enc, "n_layers", w),
        encoder_dim=enc_dim,
        encoder_heads=enc_heads,
        encoder_kv_heads=_int(enc, "n_kv_heads", w, default=enc_heads),
        encoder_head_dim=_int(enc, "head_dim", w, default=enc_dim // max(enc_heads, 1)),
        encoder_hidden_dim=_int(enc, "hidden_dim", w),
        encoder_window=_int(enc, "sliding_window", w),
        num_mel_bins=int(mel),
        downsample_factor=_int(pool_section, "downsample_factor", "multimodal.whisper_model_args.downsample_args."),
        dtype=dtype,
        max_position=_int(raw, "model_max_length", "", default=131072),
    )
    for name in (
        "decoder_layers",
        "decoder_kv_heads",
        "decoder_head_dim",
        "decoder_window",
        "encoder_layers",
        "encoder_kv_heads",
        "encoder_head_dim",
        "encoder_window",
        "downsample_factor",
    ):
        if getattr(params, name) <= 0:
            raise ParamsError(f"params.json: {name} must be positive")
    return params


def load_params(path: Path) -> VoxtralParams:
    """Read DIR/params.json (or the file itself when `path` is a file)."""
    file = path / "params.json" if path.is_dir() else path
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ParamsError(f"{file}: not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ParamsError(f"{file}: {exc}") from None
    if not isinstance(raw, dict):
        raise ParamsError(f"{file}: not a JSON object")
    return parse_params(raw)
