"""Triton kernels for the quant ops: fp8_static_quant, fp8_dequant, nvfp4_quant, nvfp4_dequant.

Bit-exact with docs/numerics.md: every division is ``div_rn``, the fp32 -> e4m3 conversion is the
hardware's rne/satfinite one, e2m1 rounding is done in software (Hopper has no FP4 convert).
Each ``*_into`` launcher writes into caller-provided outputs (tests poison them first); the
op wrappers allocate. No host synchronisation anywhere: scales are read on the device.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from graphfuse.ops.quant_ref import round_up

from ._common import (
    TL_DTYPE,
    check_scale,
    e2m1_value,
    e4m3_sat,
    nvfp4_encode_blocks,
    swizzled_offset,
)

_BLOCK = 2048


@triton.jit
def _fp8_quant_kernel(x_ptr, s_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    s = tl.load(s_ptr).to(tl.float32)
    inv = tl.math.div_rn(tl.full([], 1.0, tl.float32), s)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, e4m3_sat(x * inv), mask=mask)


@triton.jit
def _fp8_dequant_kernel(q_ptr, s_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    s = tl.load(s_ptr).to(tl.float32)
    q = tl.load(q_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (q * s).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _nvfp4_quant_kernel(
    x_ptr,
    g_ptr,
    packed_ptr,
    scale_ptr,
    M,
    K,
    M_PAD,
    KB_PAD,
    SWIZZLE: tl.constexpr,
    BM: tl.constexpr,
    NB: tl.constexpr,
):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    kb = tl.program_id(1) * NB + tl.arange(0, NB)  # block columns
    cols = tl.program_id(1) * NB * 16 + tl.arange(0, NB * 16)
    kblocks = K // 16
    rows64 = rows.to(tl.int64)
    valid = (rows[:, None] < M) & (cols[None, :] < K)
    x = tl.load(x_ptr + rows64[:, None] * K + cols[None, :], mask=valid, other=0.0)
    g = tl.load(g_ptr).to(tl.float32)
    packed, sbits = nvfp4_encode_blocks(x.to(tl.float32), g, NB)
    pcols = tl.program_id(1) * NB * 8 + tl.arange(0, NB * 8)
    pmask = (rows[:, None] < M) & (pcols[None, :] < K // 2)
    tl.store(packed_ptr + rows64[:, None] * (K // 2) + pcols[None, :], packed, mask=pmask)
    sval = (rows[:, None] < M) & (kb[None, :] < kblocks)
    sbits = tl.where(sval, sbits, 0).to(tl.uint8)
    if SWIZZLE:
        off = swizzled_offset(rows64[:, None], kb[None, :], KB_PAD // 4)
        smask = (rows[:, None] < M_PAD) & (kb[None, :] < KB_PAD)
    else:
        off = rows64[:, None] * kblocks + kb[None, :]
        smask = sval
    tl.store(scale_ptr + off, sbits, mask=smask)


@triton.jit
def _nvfp4_dequant_kernel(
    packed_ptr,
    scale_ptr,
    g_ptr,
    out_ptr,
    M,
    K,
    KB_PAD,
    SWIZZLED: tl.constexpr,
    BM: tl.constexpr,
    NB: tl.constexpr,
):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    rows64 = rows.to(tl.int64)
    kb = tl.program_id(1) * NB + tl.arange(0, NB)
    pcols = tl.program_id(1) * NB * 8 + tl.arange(0, NB * 8)
    pmask = (rows[:, None] < M) & (pcols[None, :] < K // 2)
    b = tl.load(packed_ptr + rows64[:, None] * (K // 2) + pcols[None, :], mask=pmask, other=0)
    b = b.to(tl.int32)
    codes = tl.reshape(tl.join(b & 15, b >> 4), (BM, NB, 16))
    smask = (rows[:, None] < M) & (kb[None, :] < K // 16)
    if SWIZZLED:
        soff = swizzled_offset(rows64[:, None], kb[None, :], KB_PAD // 4)
    else:
        soff = rows64[:, None] * (K // 16) + kb[None, :]
    sf = tl.load(scale_ptr + soff, mask=smask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr).to(tl.float32)
    v = e2m1_value(codes) * sf[:, :, None]
    v = tl.math.div_rn(v, tl.full(v.shape, 1.0, tl.float32) * g)
    v = tl.reshape(v, (BM, NB * 16))
    cols = tl.program_id(1) * NB * 16 + tl.arange(0, NB * 16)
    omask = (rows[:, None] < M) & (cols[None, :] < K)
    tl.store(
        out_ptr + rows64[:, None] * K + cols[None, :], v.to(out_ptr.dtype.element_ty), mask=omask
    )


def _check_cuda(op: str, t: torch.Tensor, name: str) -> None:
    if not t.is_cuda:
        raise ValueError(f"graphfuse::{op}: {name} must be a CUDA tensor, got {t.device}")


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
        _fp8_quant_kernel[(triton.cdiv(n, _BLOCK),)](x, scale, out, n, BLOCK=_BLOCK)


def fp8_static_quant(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """CUDA impl of ``graphfuse::fp8_static_quant``."""
    _check_cuda("fp8_static_quant", x, "x")
    out = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    fp8_static_quant_into(x, scale, out)
    return out


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
        _fp8_dequant_kernel[(triton.cdiv(n, _BLOCK),)](x, scale, out, n, BLOCK=_BLOCK)


def fp8_dequant(x: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """CUDA impl of ``graphfuse::fp8_dequant``."""
    _check_cuda("fp8_dequant", x, "x")
    out = torch.empty(x.shape, dtype=dtype, device=x.device)
    fp8_dequant_into(x, scale, out)
    return out


def nvfp4_scale_shape(m: int, k: int, swizzle: bool) -> tuple[int, int]:
    """Shape of the block-scale tensor for an ``[m, k]`` input."""
    return (round_up(m, 128), round_up(k // 16, 4)) if swizzle else (m, k // 16)


def _nvfp4_mk(op: str, shape: torch.Size, k_last: int) -> tuple[int, int]:
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
    m, k = _nvfp4_mk("nvfp4_quant", x.shape, x.shape[-1] if x.dim() else 0)
    x = x.contiguous()
    sshape = nvfp4_scale_shape(m, k, swizzle)
    if tuple(packed.shape) != (m, k // 2) or tuple(scale.shape) != sshape:
        raise ValueError(
            f"graphfuse::nvfp4_quant: outputs must be {(m, k // 2)} and {sshape}, got "
            f"{tuple(packed.shape)} and {tuple(scale.shape)}"
        )
    mp, kbp = sshape
    if mp == 0:
        return
    bm, nb = 32, 4
    grid = (triton.cdiv(mp, bm), triton.cdiv(kbp, nb))
    _nvfp4_quant_kernel[grid](
        x, g, packed, scale.view(torch.uint8), m, k, mp, kbp, SWIZZLE=swizzle, BM=bm, NB=nb
    )


def nvfp4_quant(
    x: torch.Tensor, global_scale: torch.Tensor, swizzle: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """CUDA impl of ``graphfuse::nvfp4_quant``."""
    _check_cuda("nvfp4_quant", x, "x")
    m, k = _nvfp4_mk("nvfp4_quant", x.shape, x.shape[-1] if x.dim() else 0)
    packed = torch.empty((m, k // 2), dtype=torch.uint8, device=x.device)
    scale = torch.empty(
        nvfp4_scale_shape(m, k, swizzle), dtype=torch.float8_e4m3fn, device=x.device
    )
    nvfp4_quant_into(x, global_scale, packed, scale, swizzle)
    return packed, scale


def nvfp4_dequant_into(
    packed: torch.Tensor,
    block_scale: torch.Tensor,
    g: torch.Tensor,
    out: torch.Tensor,
    swizzled: bool,
) -> None:
    """Dequantizes NVFP4 ``packed`` / ``block_scale`` into ``out`` ([..., K])."""
    check_scale("nvfp4_dequant", "global_scale", g, packed.device)
    if packed.dtype != torch.uint8 or packed.dim() < 1:
        raise ValueError(f"graphfuse::nvfp4_dequant: packed must be uint8, got {packed.dtype}")
    m, k = _nvfp4_mk("nvfp4_dequant", packed.shape, 2 * packed.shape[-1])
    sshape = nvfp4_scale_shape(m, k, swizzled)
    if tuple(block_scale.shape) != sshape or block_scale.dtype != torch.float8_e4m3fn:
        raise ValueError(
            f"graphfuse::nvfp4_dequant: block_scale must be float8_e4m3fn {sshape}, got "
            f"{block_scale.dtype} {tuple(block_scale.shape)}"
        )
    if m == 0:
        return
    bm, nb = 32, 4
    grid = (triton.cdiv(m, bm), triton.cdiv(k // 16, nb))
    _nvfp4_dequant_kernel[grid](
        packed.contiguous(),
        block_scale.contiguous(),
        g,
        out,
        m,
        k,
        sshape[1],
        SWIZZLED=swizzled,
        BM=bm,
        NB=nb,
    )


def nvfp4_dequant(
    packed: torch.Tensor,
    block_scale: torch.Tensor,
    global_scale: torch.Tensor,
    dtype: torch.dtype,
    swizzled: bool = True,
) -> torch.Tensor:
    """CUDA impl of ``graphfuse::nvfp4_dequant``."""
    _check_cuda("nvfp4_dequant", packed, "packed")
    shape = (*packed.shape[:-1], 2 * packed.shape[-1]) if packed.dim() else ()
    out = torch.empty(shape, dtype=dtype, device=packed.device)
    nvfp4_dequant_into(packed, block_scale, global_scale, out, swizzled)
    return out
