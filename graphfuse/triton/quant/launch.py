"""Launchers of the quant kernels: each ``*_into`` checks its arguments and writes into
caller-provided outputs (tests poison them first); the op impls in ``ops.py`` allocate."""

from __future__ import annotations

import torch
import triton

from graphfuse.ops.quant_ref import nvfp4_scale_shape

from ..host import TL_DTYPE, check_scale
from .kernels import (
    fp8_dequant_kernel,
    fp8_quant_kernel,
    fp8_upcast_kernel,
    fp8_upcast_rows_kernel,
    nvfp4_dequant_kernel,
    nvfp4_quant_kernel,
)

_BLOCK = 2048  # elements a program of the FP8 kernels
_UPCAST_BLOCK = 8192  # elements a program of the upcast (8 warps: 32 bytes in, 64 out a thread)
_UPCAST_TILE = 64  # rows and columns of a tile of the upcast into contiguous rows
_GRID_YZ = 65535  # the largest second and third grid dimension
_BM, _NB = 32, 4  # rows and 16-blocks a program of the NVFP4 kernels


def fp8_static_quant_into(x: torch.Tensor, scale: torch.Tensor, out: torch.Tensor) -> None:
    """Writes ``e4m3(clamp(x * (1/scale)))`` into ``out`` (same shape, float8_e4m3fn)."""
    check_scale("fp8_static_quant", "scale", scale, x.device)
    x = x.contiguous()
    if out.shape != x.shape or out.dtype != torch.float8_e4m3fn or not out.is_contiguous():
        raise ValueError(
            f"graphfuse::fp8_static_quant: out must be contiguous float8_e4m3fn of shape "
            f"{tuple(x.shape)}, got {tuple(out.shape)} {out.dtype}"
        )
    n = x.numel()
    if n:
        fp8_quant_kernel[(triton.cdiv(n, _BLOCK),)](x, scale, out, n, BLOCK=_BLOCK)


def fp8_dequant_into(x: torch.Tensor, scale: torch.Tensor, out: torch.Tensor) -> None:
    """Writes ``float(x) * scale`` rounded to ``out.dtype`` into ``out``."""
    check_scale("fp8_dequant", "scale", scale, x.device)
    if x.dtype != torch.float8_e4m3fn:
        raise ValueError(f"graphfuse::fp8_dequant: x must be float8_e4m3fn, got {x.dtype}")
    if out.dtype not in TL_DTYPE or out.dtype == torch.float8_e4m3fn:
        raise ValueError(f"graphfuse::fp8_dequant: unsupported dtype {out.dtype}")
    x = x.contiguous()
    n = x.numel()
    if n:
        fp8_dequant_kernel[(triton.cdiv(n, _BLOCK),)](x, scale, out, n, BLOCK=_BLOCK)


def _dense(t: torch.Tensor) -> bool:
    """Whether ``t``'s elements fill ``t.numel()`` consecutive slots of its storage (its strides a
    permutation of a contiguous tensor's)."""
    expect = 1
    for stride, size in sorted((s, n) for s, n in zip(t.stride(), t.shape) if n != 1):
        if stride != expect:
            return False
        expect *= size
    return True


def fp8_upcast(
    x: torch.Tensor, dtype: torch.dtype = torch.float16, contiguous: bool = False
) -> torch.Tensor:
    """``x`` (float8_e4m3fn) as a new 16-bit tensor, exactly: the hardware conversion at copy
    speed (``x.to(torch.float16)`` converts in software: 50 µs for a prefill's 16.8M-element V
    on an H100). The result keeps ``x``'s strides where ``x`` is dense (a permuted layout
    stays permuted) and ``contiguous`` is false; otherwise it is contiguous, converted and
    rearranged in one pass (a K-major ``[B, H, S, D]`` V, ``S`` the unit stride, becomes
    ``[S, D]`` rows without a second copy).

    Example::

        v16 = fp8_upcast(v8)  # v8: float8_e4m3fn on CUDA
        rows16 = fp8_upcast(v8.transpose(-1, -2), contiguous=True)
    """
    if x.dtype != torch.float8_e4m3fn or dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"fp8_upcast: float8_e4m3fn to a 16-bit dtype, got {x.dtype} -> {dtype}")
    if (contiguous and not x.is_contiguous()) or not _dense(x):
        rows = _upcast_rows(x, dtype)
        if rows is not None:
            return rows
        x = x.contiguous()
    out = torch.empty_like(x, dtype=dtype)  # x's strides (dense x)
    n = x.numel()
    if n:
        grid = (triton.cdiv(n, _UPCAST_BLOCK),)
        fp8_upcast_kernel[grid](x, out, n, BLOCK=_UPCAST_BLOCK, num_warps=8)
    return out


def _upcast_rows(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
    """``x`` converted into a new contiguous tensor by ``fp8_upcast_rows_kernel`` (any strides,
    at most 4 dims, seen as ``[B, H, S, D]``); None where the grid cannot take it (more dims,
    no elements, B or H beyond CUDA's second and third grid dimension)."""
    if x.dim() > 4 or not x.numel():
        return None
    x4 = x[(None,) * (4 - x.dim())]  # leading unit dims: a [B, H, S, D] view
    b, h, rows, cols = x4.shape
    if b > _GRID_YZ or h > _GRID_YZ:
        return None
    out = torch.empty(x.shape, dtype=dtype, device=x.device)
    tiles = triton.cdiv(rows, _UPCAST_TILE) * triton.cdiv(cols, _UPCAST_TILE)
    fp8_upcast_rows_kernel[(tiles, h, b)](
        x4, out, rows, cols, *x4.stride(), BS=_UPCAST_TILE, BD=_UPCAST_TILE
    )
    return out


def nvfp4_rows_cols(op: str, shape: torch.Size, k_last: int) -> tuple[int, int]:
    """(M, K) of a tensor of ``shape`` with last dimension ``k_last`` viewed 2-D; raises
    ValueError unless K is a positive multiple of 16."""
    if len(shape) < 1 or k_last <= 0 or k_last % 16:
        raise ValueError(
            f"graphfuse::{op}: last dim must be a positive multiple of 16, got {k_last}"
        )
    m = 1
    for d in shape[:-1]:
        m *= d
    return m, k_last


def nvfp4_quant_into(
    x: torch.Tensor, g: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor, swizzle: bool
) -> None:
    """Quantizes ``x`` to NVFP4 into ``packed`` ([M, K/2] uint8) and ``scale`` (e4m3)."""
    check_scale("nvfp4_quant", "global_scale", g, x.device)
    m, k = nvfp4_rows_cols("nvfp4_quant", x.shape, x.shape[-1] if x.dim() else 0)
    x = x.contiguous()
    sshape = nvfp4_scale_shape(m, k, swizzle)
    if tuple(packed.shape) != (m, k // 2) or tuple(scale.shape) != sshape:
        raise ValueError(
            f"graphfuse::nvfp4_quant: outputs must be {(m, k // 2)} and {sshape}, got "
            f"{tuple(packed.shape)} and {tuple(scale.shape)}"
        )
    mp, kbp = sshape
    if mp:
        grid = (triton.cdiv(mp, _BM), triton.cdiv(kbp, _NB))
        nvfp4_quant_kernel[grid](
            x, g, packed, scale.view(torch.uint8), m, k, mp, kbp, SWIZZLE=swizzle, BM=_BM, NB=_NB
        )


def nvfp4_dequant_into(
    packed: torch.Tensor, block_scale: torch.Tensor, g: torch.Tensor, out: torch.Tensor,
    swizzled: bool,
) -> None:  # fmt: skip
    """Dequantizes NVFP4 ``packed`` / ``block_scale`` into ``out`` ([..., K])."""
    check_scale("nvfp4_dequant", "global_scale", g, packed.device)
    if packed.dtype != torch.uint8 or packed.dim() < 1:
        raise ValueError(f"graphfuse::nvfp4_dequant: packed must be uint8, got {packed.dtype}")
    m, k = nvfp4_rows_cols("nvfp4_dequant", packed.shape, 2 * packed.shape[-1])
    sshape = nvfp4_scale_shape(m, k, swizzled)
    if tuple(block_scale.shape) != sshape or block_scale.dtype != torch.float8_e4m3fn:
        raise ValueError(
            f"graphfuse::nvfp4_dequant: block_scale must be float8_e4m3fn {sshape}, got "
            f"{block_scale.dtype} {tuple(block_scale.shape)}"
        )
    if m:
        grid = (triton.cdiv(m, _BM), triton.cdiv(k // 16, _NB))
        nvfp4_dequant_kernel[grid](
            packed.contiguous(), block_scale.contiguous(), g, out, m, k, sshape[1],
            SWIZZLED=swizzled, BM=_BM, NB=_NB,
        )  # fmt: skip
