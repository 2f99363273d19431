"""Rotating cached RoPE keys in place, so a session's position clock can be shifted down without re-encoding.

A key cached at position p holds R(p)·k. Rotations about the same pairs compose, so rotating it by R(-D) gives
R(p-D)·k exactly: the cache then reads as if every token had been written D positions earlier, and the scores of
a query at P-D against it equal those of a query at P against the unshifted cache (RoPE scores depend only on the
position difference). That is what lets a long session rewind its clock before it runs past max_position.

Two pairings exist and the cache must be rotated with the one the model was run with: NeoX rotates halves
(x[i], x[i + rd/2]); GPT-J rotates interleaved pairs (x[2i], x[2i+1]). Only the first ``rotary_dim`` dims of a head
rotate; the rest pass through. An encoder that pools several states per decoder token gives its states the
positions states_per_token·p + j, so its keys shift by states_per_token·D.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["RotarySpec", "ShiftTables", "inv_freq64", "rope_rotate", "rotate_keys_", "shift_tables", "to_device"]

_TWO_PI = 2.0 * math.pi


@dataclass(frozen=True)
class RotarySpec:
    """How one attention stack applies RoPE; the shift must match it exactly or the cache is silently corrupted."""

    head_dim: int
    rotary_dim: int
    base: float
    neox: bool  # True: NeoX halves; False: GPT-J interleaved pairs
    states_per_token: int = 1  # positions per decoder token (4 for a block-pooling encoder)

    def __post_init__(self) -> None:
        """Reject specs that cannot describe a RoPE layout, so a bad config fails at start-up, not mid-session."""
        if self.head_dim <= 0:
            raise ValueError(f"head_dim must be > 0, got {self.head_dim}")
        if self.rotary_dim <= 0 or self.rotary_dim > self.head_dim:
            raise ValueError(f"rotary_dim must be in (0, head_dim={self.head_dim}], got {self.rotary_dim}")
        if self.rotary_dim % 2:
            raise ValueError(f"rotary_dim must be even (dims rotate in pairs), got {self.rotary_dim}")
        if not (math.isfinite(self.base) and self.base > 0):
            raise ValueError(f"base must be finite and > 0, got {self.base}")
        if self.states_per_token < 1:
            raise ValueError(f"states_per_token must be >= 1, got {self.states_per_token}")

    @property
    def half(self) -> int:
        """Number of rotated pairs (one frequency each)."""
        return self.rotary_dim // 2


@dataclass(frozen=True)
class ShiftTables:
    """cos/sin of one shift, one entry per rotated pair; built once per shift and reused for every layer."""

    cos: torch.Tensor  # [rotary_dim // 2], float32
    sin: torch.Tensor  # [rotary_dim // 2], float32

    def __post_init__(self) -> None:
        """Catch mismatched tables early; a broadcast would otherwise hide the mistake."""
        if self.cos.dim() != 1 or self.cos.shape != self.sin.shape:
            raise ValueError(f"cos and sin must be 1-D and alike, got {tuple(self.cos.shape)}, {tuple(self.sin.shape)}")


def inv_freq64(spec: RotarySpec) -> torch.Tensor:
    """inv_freq_i = base^(-2i/rotary_dim) in float64, so large angles stay accurate (fp32 loses ~1e-2 rad at 1e5)."""
    exponents = torch.arange(0, spec.rotary_dim, 2, dtype=torch.float64) / spec.rotary_dim
    return 1.0 / (spec.base**exponents)


def _angles64(spec: RotarySpec, positions: torch.Tensor) -> torch.Tensor:
    """positions [N] (any real dtype) -> angles [N, half] in float64, reduced to [0, 2π) before any fp32 cast."""
    angles = positions.to(torch.float64).reshape(-1, 1) * inv_freq64(spec).to(positions.device).reshape(1, -1)
    return torch.remainder(angles, _TWO_PI)


def shift_tables(spec: RotarySpec, shift_tokens: int, device: torch.device | str = "cpu") -> ShiftTables:
    """cos/sin of R(-shift) for a shift of ``shift_tokens`` decoder tokens (states_per_token positions each).

    The angle is formed and reduced mod 2π in float64 on the CPU (some accelerators lack float64) and cast to float32
    once: at a shift of ~1e5 positions an fp32 angle is off by ~1e-2 rad, which visibly perturbs attention.
    """
    shift_positions = int(shift_tokens) * spec.states_per_token
    angles = torch.remainder(-float(shift_positions) * inv_freq64(spec), _TWO_PI)
    return ShiftTables(
        cos=to_device(torch.cos(angles).to(torch.float32), torch.device(device)),
        sin=to_device(torch.sin(angles).to(torch.float32), torch.device(device)),
    )


def to_device(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A CPU tensor on `device`; to a GPU through pinned memory with a non-blocking copy, so the host does not wait
    for the step in flight (a pageable copy synchronizes: CUDA's sync debug mode counts each one)."""
    if device.type == "cuda":
        return host.pin_memory().to(device, non_blocking=True)
    return host.to(device)


def _rotate_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, neox: bool) -> torch.Tensor:
    """Rotate each pair of x[..., :rotary_dim] by its angle; returns a new tensor in x's dtype (no aliasing)."""
    half = cos.shape[-1]
    if neox:
        x1, x2 = x[..., :half], x[..., half:]
    else:
        x1, x2 = x[..., 0::2], x[..., 1::2]
    o1 = x1 * cos - x2 * sin
    o2 = x2 * cos + x1 * sin
    if neox:
        return torch.cat((o1, o2), dim=-1)
    return torch.stack((o1, o2), dim=-1).flatten(-2)


def _check_last_dim(x: torch.Tensor, spec: RotarySpec) -> None:
    if not x.is_floating_point():
        raise TypeError(f"expected a floating-point tensor, got {x.dtype}")
    if x.shape[-1] != spec.head_dim:
        raise ValueError(f"last dim {x.shape[-1]} != head_dim {spec.head_dim}")


def rotate_keys_(keys: torch.Tensor, spec: RotarySpec, tables: ShiftTables) -> None:
    """Rotate cached keys [..., head_dim] in place by the shift in ``tables``.

    Works on any float dtype and on non-contiguous views (e.g. one layer's slice of a paged cache): the math runs in
    float32 on a copy and is written back through ``copy_`` into the view, so the underlying cache is what changes.
    The float32 copy is the size of ``keys``; callers with a huge cache should pass it in chunks.
    """
    _check_last_dim(keys, spec)
    if tables.cos.shape != (spec.half,):
        raise ValueError(f"tables have {tuple(tables.cos.shape)} entries, spec needs ({spec.half},)")
    if keys.numel() == 0:
        return
    cos = tables.cos.to(device=keys.device, dtype=torch.float32)
    sin = tables.sin.to(device=keys.device, dtype=torch.float32)
    with torch.no_grad():
        view = keys[..., : spec.rotary_dim]
        # _rotate_pairs builds a fresh tensor before anything is written, so reading and writing the same
        # storage (keys already float32, where .to() does not copy) is safe.
        rotated = _rotate_pairs(view.to(torch.float32), cos, sin, spec.neox)
        view.copy_(rotated)


def rope_rotate(x: torch.Tensor, positions: torch.Tensor, spec: RotarySpec) -> torch.Tensor:
    """Reference forward RoPE: x [N, ..., head_dim] rotated to raw positions [N]; returns a new tensor of x's dtype.

    ``positions`` are the positions the model's RoPE sees (for a pooling encoder, states_per_token·p + j already);
    states_per_token is not applied here. Angles and the rotation are computed in float64, so this serves as the
    ground truth for tests and for the start-up self-check.
    """
    _check_last_dim(x, spec)
    if x.dim() < 2 or positions.dim() != 1 or positions.shape[0] != x.shape[0]:
        raise ValueError(f"need x [N, ..., head_dim] and positions [N], got {tuple(x.shape)}, {tuple(positions.shape)}")
    angles = _angles64(spec, positions.to(x.device))
    bshape = (x.shape[0],) + (1,) * (x.dim() - 2) + (spec.half,)
    cos, sin = torch.cos(angles).reshape(bshape), torch.sin(angles).reshape(bshape)
    x64 = x.to(torch.float64)
    rotated = _rotate_pairs(x64[..., : spec.rotary_dim], cos, sin, spec.neox)
    return torch.cat((rotated, x64[..., spec.rotary_dim :]), dim=-1).to(x.dtype)
