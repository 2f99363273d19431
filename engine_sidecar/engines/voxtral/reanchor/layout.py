"""Where an attention backend keeps each cached key element, found by probing its own cache-write op.

Tensor shapes mislead: vLLM's CPU backend ("vec" ISA) allocates [num_blocks, H, block_size, 2*head_dim] per layer,
yet keys fill the first half of each (block, head) page transposed d-major ([head_dim, block_size]) while values
are token-major. So instead of trusting shapes, `probe_key_layout` writes keys whose every element carries a tag
naming its (slot, head, dim) through the backend's writer into a two-block scratch cache, finds each tag, and
derives an element map (block, token, head, dim) -> storage offset, which `KeyLayout.key_view` turns into a
strided view that writes straight into the live cache.

The map need not be affine in the four indices themselves. vLLM's AMX ISA packs keys in 16-token tiles, and bf16
keys in pairs of dims (VNNI): token t sits at (t // 16)·S_tile + (t % 16)·S_tok, dim d at (d // 2)·S_pair + d % 2.
Each axis is therefore fitted as a mixed-radix number (outer digit first); the map must be affine in the digits,
which a strided view with one view dim per digit expresses exactly. Anything else is refused with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["KeyLayout", "KvWriter", "LayoutError", "probe_key_layout"]

# (key [T, H, hd], value [T, H, hd], kv_cache, slot_mapping int64 [T]) -> None; writes in place like the backend.
KvWriter = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], None]

# Tags are base-256 digits stored as digit + 1 (0 means "untouched"): bf16 holds integers exactly only up to 256.
_RADIX = 256


class LayoutError(Exception):
    """The backend's key layout is not one we can rotate in place (reason in the message)."""


@dataclass(frozen=True)
class KeyLayout:
    """Map from (block, token-in-block, head, dim) to an element of a cache tensor, affine in each axis' digits.

    `levels[a]` splits axis a (block, token, head, dim) into digits, outer first, as (size, stride) pairs whose
    sizes multiply to the axis length; an unpacked axis has one level. Strides and `offset` are in element units of
    the probed tensor's index space: with token t = t1·n2 + t2 (levels ((n1, s1), (n2, s2))) and the other axes
    alike, key (b, t, h, d) lives at ``kv_cache.storage_offset() + offset + b*sb + t1*s1 + t2*s2 + ...``. The offset
    is relative to the tensor's first element (not absolute in the storage), so one probe serves every layer's view
    of a shared buffer as long as the strides match (`key_view` checks those that matter).
    """

    block_size: int
    num_kv_heads: int
    head_dim: int
    levels: tuple[tuple[tuple[int, int], ...], ...]  # per axis (block, token, head, dim): (size, stride), outer first
    offset: int  # element offset of key (0, 0, 0, 0) from the tensor's element (0, ..., 0)
    block_dim: int  # the cache tensor dimension that counts blocks (not always 0: flash-attn is (2, blocks, ...))
    cache_shape: tuple[int, ...]  # probed shape; only the block_dim extent may differ in the live cache
    dim_strides: tuple[tuple[int, int], ...]  # (dim, stride) of every dim key elements index off 0: must match

    @property
    def packed(self) -> bool:
        """True when some axis is split into digits (tiles, pairs): `strides` does not describe it."""
        return any(len(axis) > 1 for axis in self.levels)

    @property
    def strides(self) -> tuple[int, ...]:
        """Element strides of (block, token, head, dim) for an unpacked layout."""
        if self.packed:
            raise LayoutError(f"packed layout {self.describe()} has no single stride per axis")
        return tuple(axis[0][1] for axis in self.levels)

    def describe(self) -> str:
        """The axes with their digits, e.g. 'block[1*8192] token[2*512,16*2] head[1*4096] dim[32*32,2*1]'."""
        names = ("block", "token", "head", "dim")
        return " ".join(
            f"{n}[{','.join(f'{size}*{stride}' for size, stride in axis)}]"
            for n, axis in zip(names, self.levels, strict=True)
        )

    def key_view(self, kv_cache: torch.Tensor) -> torch.Tensor:
        """[num_blocks, *token digits, *head digits, *dim digits] view onto kv_cache's storage (same memory).

        Unpacked, that is [num_blocks, block_size, H, hd]; `read`/`write` move whole blocks as [n, bs, H, hd].
        """
        self._check_compatible(kv_cache)
        sizes = [kv_cache.shape[self.block_dim]] + [size for axis in self.levels[1:] for size, _ in axis]
        strides = [self.levels[0][0][1]] + [stride for axis in self.levels[1:] for _, stride in axis]
        return torch.as_strided(kv_cache, sizes, strides, kv_cache.storage_offset() + self.offset)

    def read(self, view: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
        """Keys of `blocks` (int64 indices on the view's device) from a `key_view`, as a [n, bs, H, hd] copy."""
        return view[blocks].reshape(blocks.numel(), self.block_size, self.num_kv_heads, self.head_dim)

    def write(self, view: torch.Tensor, blocks: torch.Tensor, keys: torch.Tensor) -> None:
        """Store [n, bs, H, hd] keys into `blocks` of a `key_view` (the inverse of `read`)."""
        view[blocks] = keys.reshape(blocks.numel(), *view.shape[1:])

    def _check_compatible(self, kv_cache: torch.Tensor) -> None:
        # The map is only valid for tensors indexed like the probed one; a silent mismatch would corrupt the cache.
        shape = tuple(kv_cache.shape)
        if len(shape) != len(self.cache_shape) or any(
            a != b for i, (a, b) in enumerate(zip(shape, self.cache_shape, strict=True)) if i != self.block_dim
        ):
            raise LayoutError(
                f"cache shape {shape} does not match the probed shape {self.cache_shape} (apart from block dim "
                f"{self.block_dim})"
            )
        for dim, stride in self.dim_strides:
            if kv_cache.stride(dim) != stride:
                raise LayoutError(
                    f"cache stride {kv_cache.stride()} differs from the probed one in dim {dim} ({stride}); "
                    "probe again with kv_cache_like set to a tensor strided like this one"
                )


def probe_key_layout(
    write: KvWriter,
    cache_shape: Callable[[int], tuple[int, ...]],
    block_size: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: torch.dtype,
    kv_cache_like: torch.Tensor | None = None,
) -> KeyLayout:
    """Find the key layout by writing tagged keys with `write` into a two-block scratch cache and reading them back.

    `cache_shape(n)` is the backend's per-layer cache shape for n blocks. With `kv_cache_like` (the live cache or
    a tensor strided like it, possibly a non-contiguous view of a bigger buffer; any block count) offsets are in
    its index space, else in that of a contiguous tensor of the probed shape. Raises LayoutError when a tag is
    lost, duplicated or altered, when blocks do not map to one tensor dimension, or when the map is not affine.
    """
    shape = tuple(int(s) for s in cache_shape(2))
    num_slots = 2 * block_size
    num_elems = num_slots * num_kv_heads * head_dim
    device = kv_cache_like.device if kv_cache_like is not None else torch.device("cpu")
    ids = torch.arange(num_elems, dtype=torch.int64).view(num_slots, num_kv_heads, head_dim)
    slots = torch.arange(num_slots, dtype=torch.int64, device=device)
    zeros_v = torch.zeros(num_slots, num_kv_heads, head_dim, dtype=dtype, device=device)

    # One code path for all dtypes: base-256 digits, as many passes as the element count needs (at least one).
    num_passes = 1  # ceil(log256(num_elems)), in integers
    while _RADIX**num_passes < num_elems:
        num_passes += 1

    positions: torch.Tensor | None = None
    found = torch.zeros(0, dtype=torch.int64)
    for p in range(num_passes):
        tags = (ids // _RADIX**p % _RADIX + 1).to(dtype=dtype, device=device)
        scratch = _scratch(shape, dtype, kv_cache_like)
        write(tags, zeros_v, scratch, slots)
        flat = scratch.reshape(-1).cpu()  # logical order, whatever the scratch's memory order
        written = torch.nonzero(flat).view(-1)
        if positions is None:
            if written.numel() != num_elems:
                raise LayoutError(
                    f"the writer touched {written.numel()} elements for {num_elems} key elements: a key element is "
                    "missing, duplicated, or something besides keys was written"
                )
            positions = written
            found = torch.zeros(num_elems, dtype=torch.int64)
        elif not torch.equal(written, positions):
            raise LayoutError(f"the writer put keys in different places on probe pass {p}: its layout is not fixed")
        digits = flat[positions].to(torch.float64)
        exact = (digits == digits.round()) & (digits >= 1) & (digits <= _RADIX)
        if not bool(exact.all()):
            bad = float(digits[~exact][0])
            raise LayoutError(f"the writer altered key values (found {bad}; quantized or scaled cache?)")
        found += (digits.to(torch.int64) - 1) * _RADIX**p

    assert positions is not None  # num_passes >= 1
    if int(found.max()) >= num_elems:
        raise LayoutError("the writer produced key values that are no tag: it transforms keys")
    counts = torch.bincount(found, minlength=num_elems)
    if not bool((counts == 1).all()):
        missing = int((counts == 0).sum())
        dup = int((counts > 1).sum())
        raise LayoutError(f"{missing} key element(s) missing and {dup} duplicated in the cache after the probe write")

    # coords[b, t, h, d] = multi-index in the scratch shape where key (b, t, h, d) landed.
    order = torch.argsort(found)
    coords = torch.stack(torch.unravel_index(positions[order], shape), dim=-1)
    coords = coords.view(2, block_size, num_kv_heads, head_dim, len(shape))

    block_dim = _locate_block_dim(coords, shape)
    if kv_cache_like is not None:
        real_shape = tuple(kv_cache_like.shape)
        if len(real_shape) != len(shape) or any(
            a != b for i, (a, b) in enumerate(zip(real_shape, shape, strict=True)) if i != block_dim
        ):
            raise ValueError(
                f"kv_cache_like shape {real_shape} does not match cache_shape(2) {shape} apart from block dim "
                f"{block_dim}"
            )
        if kv_cache_like.dtype != dtype:
            raise ValueError(f"kv_cache_like dtype {kv_cache_like.dtype} differs from the probed dtype {dtype}")
        tensor_strides = tuple(int(s) for s in kv_cache_like.stride())
    else:
        tensor_strides = _contiguous_strides(shape)

    offsets = (coords * torch.tensor(tensor_strides, dtype=torch.int64)).sum(dim=-1)
    levels, offset0 = _fit_digits(offsets)
    if any(stride < 0 for axis in levels for _, stride in axis):
        raise LayoutError(f"key strides {levels} include a negative one, which a strided view cannot express")
    if torch.unique(offsets).numel() != num_elems:
        raise LayoutError("distinct key elements share memory in the cache tensor (overlapping strides)")

    used = (coords != 0).flatten(0, -2).any(dim=0)
    dim_strides = tuple((i, tensor_strides[i]) for i in range(len(shape)) if bool(used[i]))
    return KeyLayout(
        block_size=block_size,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        levels=levels,
        offset=offset0,
        block_dim=block_dim,
        cache_shape=shape,
        dim_strides=dim_strides,
    )


def _locate_block_dim(coords: torch.Tensor, shape: tuple[int, ...]) -> int:
    # The block dim is the one whose index differs between block 0 and block 1 (0 -> 1) for every key element;
    # keys of one block spread over other dims too, or blocks merged into a token dim, cannot be viewed per block.
    diff = coords[1] - coords[0]
    changed = [i for i in range(len(shape)) if bool((diff[..., i] != 0).any())]
    if len(changed) != 1:
        raise LayoutError(f"blocks 0 and 1 differ in tensor dims {changed}, not in exactly one block dimension")
    dim = changed[0]
    if shape[dim] != 2 or not (bool((coords[0, ..., dim] == 0).all()) and bool((coords[1, ..., dim] == 1).all())):
        raise LayoutError(f"tensor dim {dim} of {shape} does not index blocks 0 and 1 as 0 and 1")
    return dim


def _scratch(shape: tuple[int, ...], dtype: torch.dtype, like: torch.Tensor | None) -> torch.Tensor:
    """Zeros of `shape`, on `like`'s device and in its memory order (dims ordered by its strides), so a writer
    that honours strides, as vLLM's CUDA ops do, meets the same physical layout as in the live cache."""
    if like is None:
        return torch.zeros(shape, dtype=dtype)
    strides = like.stride()
    order = sorted(range(len(shape)), key=lambda i: (-strides[i], i))  # outermost first
    dense = torch.zeros([shape[i] for i in order], dtype=dtype, device=like.device)
    return dense.permute([order.index(i) for i in range(len(shape))])


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    return tuple(strides)


def _axis_digits(steps: list[int]) -> tuple[tuple[int, int], ...]:
    """Split one axis into mixed-radix digits from its offsets `steps[i]` (relative to index 0).

    Inner digit first: the longest run j·stride from index 0, cut to a divisor of the axis, then the same on the
    multiples of that run. Returns (size, stride) pairs, outer first; the caller checks they predict every offset.
    """
    n = len(steps)
    digits: list[tuple[int, int]] = []
    unit = 1  # index step of the current digit
    while unit < n:
        stride = steps[unit]
        run = 1
        while (run + 1) * unit < n and steps[(run + 1) * unit] == (run + 1) * stride:
            run += 1
        remaining = n // unit  # indices j·unit, j < run + 1, follow j·stride: the digit is the longest divisor of that
        size = max(k for k in range(1, min(run + 1, remaining) + 1) if remaining % k == 0)
        if size == 1:
            raise LayoutError(f"no digit of stride {stride} fits an axis of length {n} (offsets {steps[:8]}...)")
        digits.append((size, stride))
        unit *= size
    return tuple(reversed(digits)) if digits else ((n, 0),)


def _fit_digits(offsets: torch.Tensor) -> tuple[tuple[tuple[tuple[int, int], ...], ...], int]:
    """Per-axis digits and origin of offsets[b, t, h, d] if it is affine in every axis' digits, else LayoutError."""
    origin = int(offsets[0, 0, 0, 0])
    levels = []
    for axis in range(4):
        line = offsets.movedim(axis, 0)[(slice(None),) + (0,) * 3] - origin
        levels.append(_axis_digits([int(x) for x in line]))
    expected = torch.full_like(offsets, origin)
    for axis, digits in enumerate(levels):
        index = torch.arange(offsets.shape[axis], dtype=torch.int64)
        contribution = torch.zeros_like(index)
        place = 1
        for size, stride in reversed(digits):  # inner digit first
            contribution += (index // place % size) * stride
            place *= size
        shape = [1, 1, 1, 1]
        shape[axis] = -1
        expected += contribution.view(shape)
    mismatch = torch.ne(expected, offsets)
    if bool(mismatch.any()):
        b, t, h, d = (int(i) for i in torch.nonzero(mismatch)[0])
        raise LayoutError(
            f"key layout is not affine in (block, token, head, dim) nor in their digits {levels}: key "
            f"({b}, {t}, {h}, {d}) is at offset {int(offsets[b, t, h, d])}, predicted {int(expected[b, t, h, d])}"
        )
    return tuple(levels), origin
