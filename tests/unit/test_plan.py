"""Engine presets and the `voxgate plan` capacity planner: numbers checked against hand arithmetic.

Conventions of the arithmetic below (see engine_sidecar/engines/voxtral/plan/capacity.py):
- bytes per scheduler token per layer = 2 (K and V) × kv_heads × head_dim × 2 (bf16); the encoder's
  kv_heads per scheduler token = pool × n_kv_heads (vLLM's block pooling: 4 encoder states per token).
- blocks per stream per group = ceil(min(window − 1 + 1, max_model_len) / block) + 1.
- vLLM layout: page sizes unified (decoder block scaled up), layers padded to the group size, encoder window
  applied to scheduler tokens. Exact layout: own block size and layers, encoder window ceil(W / pool).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from engine_sidecar.engines.voxtral.plan import cli
from engine_sidecar.engines.voxtral.plan.capacity import (
    Budget,
    kv_groups,
    max_streams,
    parameter_count,
    parse_size,
    stream_kv,
    weight_bytes_estimate,
)
from engine_sidecar.engines.voxtral.plan.params import (
    HUB_ID,
    ParamsError,
    VoxtralParams,
    load_params,
    parse_params,
)
from engine_sidecar.engines.voxtral.plan.params import VOXTRAL_MINI_4B_REALTIME as REAL
from engine_sidecar.engines.voxtral.plan.presets import (
    PRESET_16GB,
    PRESET_DATACENTER,
    PRESETS,
    EnginePreset,
    get_preset,
)

GIB, MIB = 1 << 30, 1 << 20


def tiny_params_json() -> dict[str, Any]:
    """The tiny test checkpoint's params.json (notes: vllm-voxtral.md), Mistral layout."""
    return {
        "dim": 128,
        "n_layers": 2,
        "head_dim": 32,
        "hidden_dim": 256,
        "n_heads": 4,
        "n_kv_heads": 2,
        "rope_theta": 1e6,
        "norm_eps": 1e-5,
        "vocab_size": 2000,
        "tied_embeddings": True,
        "sliding_window": 128,
        "model_max_length": 131072,
        "causal": True,
        "use_biases": False,
        "ada_rms_norm_t_cond": True,
        "ada_rms_norm_t_cond_dim": 8,
        "multimodal": {
            "whisper_model_args": {
                "encoder_args": {
                    "audio_encoding_args": {
                        "sampling_rate": 16000,
                        "frame_rate": 12.5,
                        "num_mel_bins": 128,
                        "hop_length": 160,
                        "window_size": 400,
                        "global_log_mel_max": 1.5,
                        "transcription_format": "streaming",
                    },
                    "dim": 64,
                    "n_layers": 2,
                    "head_dim": 32,
                    "hidden_dim": 128,
                    "n_heads": 2,
                    "vocab_size": 2000,
                    "n_kv_heads": 2,
                    "use_biases": True,
                    "rope_theta": 1e6,
                    "causal": True,
                    "norm_eps": 1e-5,
                    "pos_embed": "rope",
                    "max_source_positions": None,
                    "ffn_type": "swiglu",
                    "norm_type": "rms_norm",
                    "sliding_window": 64,
                },
                "downsample_args": {"downsample_factor": 4},
            }
        },
    }


def real_params_json() -> dict[str, Any]:
    """The published Voxtral-Mini-4B-Realtime-2602 params.json (the values the built-in constant cites)."""
    raw = tiny_params_json()
    raw.update(
        dim=3072,
        n_layers=26,
        head_dim=128,
        hidden_dim=9216,
        n_heads=32,
        n_kv_heads=8,
        vocab_size=131072,
        sliding_window=8192,
        ada_rms_norm_t_cond_dim=32,
    )
    enc = raw["multimodal"]["whisper_model_args"]["encoder_args"]
    enc.update(
        dim=1280,
        n_layers=32,
        head_dim=64,
        hidden_dim=5120,
        n_heads=32,
        n_kv_heads=32,
        vocab_size=131072,
        sliding_window=750,
    )
    return raw


@pytest.fixture
def tiny_dir(tmp_path: Path) -> Path:
    (tmp_path / "params.json").write_text(json.dumps(tiny_params_json()))
    return tmp_path


@pytest.fixture
def tiny(tiny_dir: Path) -> VoxtralParams:
    return load_params(tiny_dir)


# ---------------------------------------------------------------- params


def test_tiny_params_json_reads_the_mistral_layout(tiny: VoxtralParams) -> None:
    assert (tiny.decoder_layers, tiny.decoder_kv_heads, tiny.decoder_head_dim, tiny.decoder_window) == (2, 2, 32, 128)
    assert (tiny.encoder_layers, tiny.encoder_kv_heads, tiny.encoder_head_dim, tiny.encoder_window) == (2, 2, 32, 64)
    assert (tiny.downsample_factor, tiny.dtype, tiny.dtype_bytes, tiny.ada_cond_dim) == (4, "bfloat16", 2, 8)


def test_builtin_constant_equals_the_published_params_json(tmp_path: Path) -> None:
    (tmp_path / "params.json").write_text(json.dumps(real_params_json()))
    assert load_params(tmp_path) == REAL
    assert load_params(tmp_path / "params.json") == REAL  # a file works too


def test_bad_params_are_refused(tmp_path: Path) -> None:
    raw = tiny_params_json()
    raw["multimodal"]["whisper_model_args"]["encoder_args"]["causal"] = False
    with pytest.raises(ParamsError, match="causal"):
        parse_params(raw)
    with pytest.raises(ParamsError, match="not a Voxtral"):
        parse_params({"dim": 128, "n_layers": 2})
    del raw["multimodal"]["whisper_model_args"]["encoder_args"]["sliding_window"]
    raw["multimodal"]["whisper_model_args"]["encoder_args"]["causal"] = True
    with pytest.raises(ParamsError, match="sliding_window"):
        parse_params(raw)
    with pytest.raises(ParamsError, match="not found"):
        load_params(tmp_path / "missing")


# ---------------------------------------------------------------- KV per stream, real model


def test_real_model_kv_per_stream_vllm_layout() -> None:
    # decoder per token per layer: 2 × 8 kv heads × 128 × 2 B = 4096 B → page (16 tokens) = 65,536 B
    # encoder per token per layer: 2 × (4 × 32) × 64 × 2 B = 32,768 B → page (16 tokens) = 524,288 B
    # unify pages: decoder block = 16 × 524,288 / 65,536 = 128 tokens (the notes' "(8·bs, bs)")
    # group size: layers 26 and 32; 32 < 26 × 1.25 = 32.5 → 32, decoder padded from 26 to 32 layers
    # one block of either group = 524,288 B × 32 layers = 16,777,216 B (16 MiB)
    dec, enc = kv_groups(REAL)
    assert (dec.block_size, enc.block_size, dec.layers, enc.layers) == (128, 16, 32, 32)
    assert dec.block_bytes == enc.block_bytes == 16_777_216
    # stock 8192/750: decoder ceil(8192/128) + 1 = 65; encoder ceil(750/16) = 47, + 1 = 48 → 113 blocks
    # 113 × 16,777,216 = 1,895,825,408 B (1808 MiB)
    kv = stream_kv((dec, enc), max_model_len=131072)
    assert [g.blocks for g in kv.groups] == [65, 48]
    assert kv.bytes == 1_895_825_408
    # 512/256: decoder 512/128 + 1 = 5; encoder 256/16 + 1 = 17 → 22 × 16 MiB = 369,098,752 B (352 MiB)
    assert stream_kv(kv_groups(REAL, 512, 256), 8192).bytes == 369_098_752
    # 1024/512: 1024/128 + 1 = 9; 512/16 + 1 = 33 → 42 × 16 MiB = 704,643,072 B (672 MiB)
    assert stream_kv(kv_groups(REAL, 1024, 512), 32768).bytes == 704_643_072


def test_real_model_kv_per_stream_exact_layout() -> None:
    # decoder: 26 layers × 4096 B = 106,496 B per token; ceil(8192/16) + 1 = 513 blocks = 8208 tokens
    #   8208 × 106,496 = 874,119,168 B
    # encoder: 32 layers × 32,768 B = 1,048,576 B per token; window ceil(750/4) = 188 tokens
    #   ceil(188/16) + 1 = 13 blocks = 208 tokens × 1,048,576 = 218,103,808 B
    # total 1,092,222,976 B: vLLM's layout (1,895,825,408) costs 1.74× what the model needs
    kv = stream_kv(kv_groups(REAL, layout="exact"), 131072)
    assert [g.bytes for g in kv.groups] == [874_119_168, 218_103_808]
    assert kv.bytes == 1_092_222_976


def test_encoder_tokens_are_pooled_decoder_tokens() -> None:
    # one scheduler token carries pool = 4 encoder states (positions 4p + j): the encoder group's bytes per
    # token are 4 × those of one encoder state; the exact window in tokens is ceil(750 / 4) = 188.
    _, enc = kv_groups(REAL, layout="exact")
    per_state = 2 * REAL.encoder_kv_heads * REAL.encoder_head_dim * 2 * REAL.encoder_layers  # 262,144 B
    assert enc.bytes_per_token == 4 * per_state == 1_048_576
    assert enc.window == 188
    _, enc_vllm = kv_groups(REAL)
    assert enc_vllm.window == 750  # vLLM applies the raw encoder window to scheduler tokens (4× over-holding)


def test_real_model_weights_estimate() -> None:
    # decoder layer: 3072·128·(32 + 2·8) = 18,874,368 (wq wk wv) + 32·128·3072 = 12,582,912 (wo)
    #   + 3·3072·9216 = 84,934,656 (SwiGLU) + 2·3072·32 = 196,608 (ada-RMSNorm) = 116,588,544; × 26 = 3,031,302,144
    # tied embeddings 131072·3072 = 402,653,184 → decoder 3,433,955,328 (the published 3.4B)
    # encoder layer: 1280·64·(32 + 64) = 7,864,320 + 32·64·1280 = 2,621,440 + 3·1280·5120 = 19,660,800
    #   = 30,146,560; × 32 = 964,689,920; conv stem 3·128·1280 + 3·1280·1280 = 5,406,720 → 970,096,640 (970M)
    # adapter 4·1280·3072 + 3072·3072 = 25,165,824
    # total 4,429,217,792 parameters × 2 B = 8,858,435,584 B
    assert parameter_count(REAL) == 4_429_217_792
    assert weight_bytes_estimate(REAL) == 8_858_435_584


def test_real_model_streams_on_16gib_and_80gib() -> None:
    weights = 8_858_435_584
    # 16 GiB × 0.90 = 17,179,869,184 × 0.9 = 15,461,882,265.6 → 15,461,882,265
    # − weights 8,858,435,584 − reserve 2 GiB 2,147,483,648 = 4,455,963,033 B of KV
    b16 = Budget(16 * GIB, 0.90, weights, 2 * GIB)
    assert b16.kv_bytes == 4_455_963_033
    # 512/256: 4,455,963,033 / 369,098,752 = 12.07 → 12 (13 × = 4,798,283,776 too much); preset cap 4
    assert max_streams(b16, 369_098_752) == 12
    assert max_streams(b16, 369_098_752, PRESET_16GB.max_num_seqs) == 4
    # stock: 4,455,963,033 / 1,895,825,408 = 2.35 → 2;  1024/512: / 704,643,072 = 6.32 → 6
    assert max_streams(b16, 1_895_825_408) == 2
    assert max_streams(b16, 704_643_072) == 6
    # 80 GiB × 0.92 = 85,899,345,920 × 0.92 = 79,027,398,246.4 → 79,027,398,246
    # − 8,858,435,584 − 6 GiB 6,442,450,944 = 63,726,511,718 B of KV
    b80 = Budget(80 * GIB, 0.92, weights, 6 * GIB)
    assert b80.kv_bytes == 63_726_511_718
    # 1024/512: / 704,643,072 = 90.44 → 90, capped to the datacenter preset's 64; stock: / 1,895,825,408 → 33
    assert max_streams(b80, 704_643_072, PRESET_DATACENTER.max_num_seqs) == 64
    assert max_streams(b80, 704_643_072) == 90
    assert max_streams(b80, 1_895_825_408) == 33
    assert max_streams(Budget(8 * GIB, 0.9, weights, 2 * GIB), 369_098_752) == 0  # weights do not even fit


# ---------------------------------------------------------------- KV per stream, tiny model


def test_tiny_model_kv_per_stream(tiny: VoxtralParams) -> None:
    # decoder per token per layer: 2 × 2 × 32 × 2 B = 256 B → page 16 × 256 = 4096 B
    # encoder per token per layer: 2 × (4 × 2) × 32 × 2 B = 1024 B → page 16 × 1024 = 16,384 B
    # decoder block = 16 × 16,384 / 4096 = 64 tokens; layers 2 and 2 → group size 2, no padding
    # block bytes = 16,384 × 2 = 32,768 B
    dec, enc = kv_groups(tiny)
    assert (dec.block_size, enc.block_size, dec.block_bytes, enc.block_bytes) == (64, 16, 32_768, 32_768)
    # windows 128/64: decoder ceil(128/64) + 1 = 3; encoder ceil(64/16) + 1 = 5 → 8 × 32,768 = 262,144 B
    assert stream_kv((dec, enc), 4096).bytes == 262_144
    # max_model_len 48 caps tokens held: decoder ceil(48/64) + 1 = 2; encoder ceil(48/16) + 1 = 4 → 6 blocks
    assert stream_kv((dec, enc), 48).bytes == 196_608
    # 2 tokens per step: decoder ceil(129/64) + 1 = 4; encoder ceil(65/16) + 1 = 6 → 10 blocks = 327,680 B
    assert stream_kv((dec, enc), 4096, tokens_per_step=2).bytes == 327_680
    # exact: decoder 2 layers × 256 = 512 B/token, ceil(128/16) + 1 = 9 blocks = 144 tokens → 73,728 B;
    # encoder 2 × 1024 = 2048 B/token, window ceil(64/4) = 16, ceil(16/16) + 1 = 2 blocks = 32 tokens → 65,536 B
    exact = stream_kv(kv_groups(tiny, layout="exact"), 4096)
    assert [g.bytes for g in exact.groups] == [73_728, 65_536]
    assert exact.bytes == 139_264


@pytest.mark.parametrize(("block", "groups"), [(128, (512, 128)), (32, (128, 32)), (16, (64, 16))])
def test_tiny_block_sizes_match_what_the_prototype_saw(
    tiny: VoxtralParams, block: int, groups: tuple[int, int]
) -> None:
    # notes (reanchor-map): tiny model, block size 128 → groups (512, 128); block size 32 → (128, 32)
    dec, enc = kv_groups(tiny, block_size=block)
    assert (dec.block_size, enc.block_size) == groups


def test_tiny_model_weights_and_streams(tiny: VoxtralParams) -> None:
    # decoder layer: 128·32·(4 + 4) = 32,768 + 4·32·128 = 16,384 + 3·128·256 = 98,304 + 2·128·8 = 2,048
    #   = 149,504; × 2 = 299,008; tied embeddings 2000·128 = 256,000
    # encoder layer: 64·32·(2 + 4) = 12,288 + 2·32·64 = 4,096 + 3·64·128 = 24,576 = 40,960; × 2 = 81,920
    # conv stem 3·128·64 + 3·64·64 = 36,864; adapter 4·64·128 + 128·128 = 49,152
    # total 722,944 parameters × 2 B = 1,445,888 B (the notes' "1.4 MB bf16")
    assert weight_bytes_estimate(tiny) == 1_445_888
    # 4 MiB × 0.5 = 2,097,152 − 1,445,888 = 651,264 B of KV; / 262,144 = 2.48 → 2; cap 1 → 1
    budget = Budget(4 * MIB, 0.5, 1_445_888, 0)
    assert budget.kv_bytes == 651_264
    assert max_streams(budget, 262_144) == 2
    assert max_streams(budget, 262_144, 1) == 1


def test_fp8_kv_halves_the_pages() -> None:
    assert stream_kv(kv_groups(REAL, 512, 256, kv_cache_dtype="fp8"), 8192).bytes == 369_098_752 // 2


# ---------------------------------------------------------------- sizes


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("16GiB", 17_179_869_184),
        ("16GB", 17_179_869_184),
        ("16G", 17_179_869_184),
        ("80G", 85_899_345_920),
        ("24576MiB", 25_769_803_776),
        ("24576M", 25_769_803_776),
        ("1.5GiB", 1_610_612_736),
        ("16 gib", 16 * GIB),
        ("1TiB", 1 << 40),
        ("512KiB", 524_288),
        ("1024", 1024),
        ("100B", 100),
    ],
)
def test_parse_size(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "sixteen", "16XB", "-1G", "GiB", "16iB", "1e9"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


# ---------------------------------------------------------------- presets


@pytest.mark.parametrize("preset", list(PRESETS.values()), ids=list(PRESETS))
def test_preset_invariants(preset: EnginePreset) -> None:
    assert preset.max_num_batched_tokens >= 400 * preset.max_num_seqs
    assert preset.max_num_batched_tokens >= 512
    assert preset.enable_prefix_caching is False
    assert preset.cudagraph_mode == "PIECEWISE"
    assert preset.kv_cache_dtype == "auto"  # re-anchoring refuses fp8 KV
    assert preset.mm_processor_cache_gb == 0
    assert preset.env_dict()["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert preset.max_model_len < 131072  # bounded
    assert preset.max_model_len - (preset.decoder_window or 0) > 4096  # room for the re-anchor margin
    assert 0 < preset.gpu_memory_utilization < 1
    kwargs = preset.engine_kwargs()
    assert kwargs["enable_prefix_caching"] is False
    assert kwargs["compilation_config"] == {"cudagraph_mode": "PIECEWISE"}
    assert kwargs["hf_overrides"] == {
        "text_config": {"sliding_window": preset.decoder_window},
        "audio_config": {"sliding_window": preset.encoder_window},
    }


def test_16gb_is_the_linto_recipe() -> None:
    p = get_preset("16GB")
    assert (p.decoder_window, p.encoder_window, p.max_num_seqs) == (512, 256, 4)
    assert (p.decoder_window or 0) > 256  # 256 is the published break point


def test_with_max_num_seqs_keeps_the_batched_tokens_rule() -> None:
    more = PRESET_16GB.with_max_num_seqs(12)
    assert (more.max_num_seqs, more.max_num_batched_tokens) == (12, 4800)
    fewer = PRESET_16GB.with_max_num_seqs(2)
    assert (fewer.max_num_seqs, fewer.max_num_batched_tokens) == (2, 2048)
    with pytest.raises(ValueError):
        get_preset("nope")


def test_stock_windows_drop_the_overrides() -> None:
    stock = PRESET_16GB.with_windows(None, None)
    assert "hf_overrides" not in stock.engine_kwargs()
    assert "--decoder-window" not in stock.serve_flags()
    assert "--hf-overrides" not in stock.vllm_flags()


# ---------------------------------------------------------------- CLI


def plan_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert cli.main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_text_prints_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--gpu-memory", "16GiB", "--preset", "16gb"]) == 0
    out = capsys.readouterr().out
    serve = next(line for line in out.splitlines() if "voxgate serve" in line and "--decoder-window 512" in line)
    for flag in (
        "--preset 16gb",
        "--max-num-seqs 4",
        "--max-model-len 8192",
        "--max-num-batched-tokens 2048",
        "--decoder-window 512",
        "--encoder-window 256",
        "--gpu-memory-utilization 0.9",
        "--kv-cache-dtype auto",
    ):
        assert flag in serve
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True vllm serve" in out
    assert "--no-enable-prefix-caching" in out
    assert '"cudagraph_mode": "PIECEWISE"' in out
    assert '{"text_config":{"sliding_window":512},"audio_config":{"sliding_window":256}}' in out
    assert "369098752 B" in out and "memory admits 12, max streams 4" in out
    assert "1895825408 B" in out and "memory admits 2, max streams 2" in out  # stock windows


def test_cli_json_builtin_model(capsys: pytest.CaptureFixture[str]) -> None:
    plan = plan_json(capsys, "--gpu-memory", "80G")
    assert plan["model"] == HUB_ID and plan["weight_bytes"] == 8_858_435_584
    by_name = {p["preset"]: p for p in plan["presets"]}
    assert set(by_name) == {"16gb", "datacenter"}
    dc = by_name["datacenter"]
    assert dc["kv_budget_bytes"] == 63_726_511_718
    rows = {(r["decoder_window"], r["encoder_window"]): r for r in dc["rows"]}
    assert set(rows) == {(1024, 512), (8192, 750), (512, 256)}
    assert rows[1024, 512]["label"] == "preset"
    assert (rows[1024, 512]["memory_streams"], rows[1024, 512]["max_streams"]) == (90, 64)
    assert rows[8192, 750]["kv_bytes_per_stream"] == 1_895_825_408
    assert rows[8192, 750]["kv_bytes_per_stream_exact"] == 1_092_222_976
    assert rows[8192, 750]["engine"]["max_num_seqs"] == 33  # lowered to what memory admits
    assert rows[1024, 512]["engine"]["hf_overrides"] == {
        "text_config": {"sliding_window": 1024},
        "audio_config": {"sliding_window": 512},
    }
    # the same dimensions for the hub id and for no --model
    assert plan_json(capsys, "--gpu-memory", "80G", "--model", HUB_ID)["presets"] == plan["presets"]


def test_cli_json_tiny_dir(capsys: pytest.CaptureFixture[str], tiny_dir: Path) -> None:
    # 2 MiB × 0.9 = 1,887,436.8 → 1,887,436; − weights 1,445,888 − reserve 0 = 441,548 B of KV
    # 128/64: 441,548 / 262,144 = 1.68 → 1 stream; the preset's 512/256 on the tiny model:
    #   decoder ceil(512/64) + 1 = 9, encoder ceil(256/16) + 1 = 17 → 26 × 32,768 = 851,968 B → 0 streams
    plan = plan_json(
        capsys,
        "--model",
        str(tiny_dir),
        "--gpu-memory",
        "2MiB",
        "--preset",
        "16gb",
        "--reserve",
        "0",
        "--window",
        "128/64",
    )
    (pre,) = plan["presets"]
    assert (plan["weight_source"], pre["kv_budget_bytes"]) == ("estimated from params", 441_548)
    rows = {r["label"]: r for r in pre["rows"]}
    assert (rows["preset"]["kv_bytes_per_stream"], rows["preset"]["max_streams"]) == (851_968, 0)
    assert rows["preset"]["serve_command"] is None and "does not fit" in rows["preset"]["notes"][0]
    assert (rows["128/64"]["kv_bytes_per_stream"], rows["128/64"]["kv_bytes_per_stream_exact"]) == (262_144, 139_264)
    assert rows["128/64"]["max_streams"] == 1
    assert "--max-num-seqs 1" in rows["128/64"]["serve_command"]


def test_cli_reads_weights_from_the_checkpoint_file(capsys: pytest.CaptureFixture[str], tiny_dir: Path) -> None:
    (tiny_dir / "consolidated.safetensors").write_bytes(b"\0" * 1000)
    plan = plan_json(capsys, "--model", str(tiny_dir), "--gpu-memory", "1GiB")
    assert plan["weight_bytes"] == 1000


def test_cli_as_a_voxgate_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="voxgate")
    sub = parser.add_subparsers(dest="command", required=True)
    cli.add_plan_arguments(sub.add_parser("plan"))
    args = parser.parse_args(["plan", "--gpu-memory", "24576MiB", "--preset", "16gb", "--json"])
    assert cli.run_plan(args) == 0
    assert json.loads(capsys.readouterr().out)["gpu_memory_bytes"] == 24 * GIB


def test_cli_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert cli.main(["--gpu-memory", "16GiB", "--model", str(tmp_path / "nope")]) == 2
    (tmp_path / "params.json").write_text(json.dumps({"dim": 1}))
    assert cli.main(["--gpu-memory", "16GiB", "--model", str(tmp_path)]) == 2
    assert "not a Voxtral" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["--gpu-memory", "sixteen"])
    with pytest.raises(SystemExit):
        cli.main(["--gpu-memory", "16GiB", "--window", "512"])
