"""Triton device helpers shared by the quant and attention kernels (NUMERICS.md formats).

Imported only from the Triton kernel modules, never at ``import graphfuse``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

FP8_MAX = 448.0


@triton.jit
def e4m3_sat(v):
    """fp32 -> float8_e4m3fn with NUMERICS.md's rules: rne, saturating at +-448, NaN kept."""
    c = tl.minimum(tl.maximum(v, -448.0), 448.0)
    c = tl.where(v != v, v, c)
    return c.to(tl.float8e4nv)


@triton.jit
def e2m1_code(v):
    """The 4-bit e2m1 code (int32 in 0..15) of fp32 ``v``: rne, saturating at 6, sign kept."""
    a = tl.abs(v)
    mag = (
        (a > 0.25).to(tl.int32)
        + (a >= 0.75).to(tl.int32)
        + (a > 1.25).to(tl.int32)
        + (a >= 1.75).to(tl.int32)
        + (a > 2.5).to(tl.int32)
        + (a >= 3.5).to(tl.int32)
        + (a > 5.0).to(tl.int32)
    )
    sign = (v.to(tl.int32, bitcast=True) >> 31) & 1
    return mag | (sign << 3)


@triton.jit
def e2m1_value(code):
    """fp32 value of an e2m1 code (int32, 0..15)."""
    mag = code & 7
    e = mag >> 1
    m = (mag & 1).to(tl.float32)
    # e == 0: 0 or 0.5; e >= 1: (1 + m/2) * 2^(e-1)
    pow2 = tl.where(e == 3, 4.0, tl.where(e == 2, 2.0, 1.0))
    val = tl.where(e == 0, m * 0.5, (1.0 + m * 0.5) * pow2)
    # the sign as a bit (a negation may be emitted as 0 - x, which loses -0)
    bits = val.to(tl.int32, bitcast=True) | ((code & 8) << 28)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def nvfp4_encode_blocks(x, g, NB: tl.constexpr):
    """Encodes ``x`` (fp32 ``[R, NB*16]``, rows of whole 16-blocks) with global scale ``g``.

    Returns (packed ``[R, NB*8]`` uint8, scale bytes ``[R, NB]`` uint8).
    """
    R: tl.constexpr = x.shape[0]
    xb = tl.reshape(x, (R, NB, 16))
    has_nan = tl.max((xb != xb).to(tl.int32), axis=2) > 0
    amax = tl.max(tl.abs(xb), axis=2)
    sf8 = e4m3_sat(g * tl.math.div_rn(amax, tl.full(amax.shape, 6.0, tl.float32)))
    sf = sf8.to(tl.float32)
    one = tl.full(sf.shape, 1.0, tl.float32)
    inv = tl.where(sf == 0.0, 0.0, tl.math.div_rn(one, tl.math.div_rn(sf, one * g)))
    v = xb * inv[:, :, None]
    v = tl.where(xb == 0.0, xb, v)
    codes = tl.reshape(e2m1_code(v), (R, NB * 8, 2))
    lo, hi = tl.split(codes)
    packed = (lo | (hi << 4)).to(tl.uint8)
    sbits = sf8.to(tl.uint8, bitcast=True)
    sbits = tl.where(has_nan, 0x7F, sbits).to(tl.uint8)
    return packed, sbits


@triton.jit
def swizzled_offset(m, k, n_ktiles):
    """Flat byte offset of block scale (row m, block column k) in the swizzled layout."""
    return (
        ((m // 128) * n_ktiles + (k // 4)) * 512 + (m % 32) * 16 + ((m % 128) // 32) * 4 + (k % 4)
    )


TL_DTYPE = {
    torch.float32: tl.float32,
    torch.float16: tl.float16,
    torch.bfloat16: tl.bfloat16,
    torch.float8_e4m3fn: tl.float8e4nv,
}


def round_up(x: int, m: int) -> int:
    """``x`` rounded up to a multiple of ``m``."""
    return (x + m - 1) // m * m


def check_scale(op: str, name: str, s: torch.Tensor, device: torch.device) -> None:
    """Raises ValueError unless ``s`` is a one-element floating tensor on ``device``."""
    if s.numel() != 1 or not s.is_floating_point() or s.device != device:
        raise ValueError(
            f"graphfuse::{op}: {name} must be a one-element floating tensor on {device}, "
            f"got shape {tuple(s.shape)}, dtype {s.dtype}, device {s.device}"
        )


@triton.jit
def store_attention_out(
    o,
    row_off,
    row_ok,
    out_ptr,
    oscale_ptr,
    sf_ptr,
    D,
    NV_K,
    NV_KBPAD,
    OUT_KIND: tl.constexpr,
    DP: tl.constexpr,
):
    """Writes the normalised attention rows ``o`` (fp32 ``[R, DP]``) in the requested format.

    ``row_off`` (int64 ``[R]``) is each row's element offset in the output layout (contiguous
    along D). OUT_KIND 0: ``out_ptr``'s dtype; 1: FP8 with dequant scale ``oscale_ptr``;
    2: NVFP4 with encode global scale ``oscale_ptr``, the layout viewed as ``[M, NV_K]``,
    packed bytes to ``out_ptr`` and swizzled scale bytes (uint8) to ``sf_ptr``.
    """
    offs_d = tl.arange(0, DP)
    if OUT_KIND == 0:
        mask = row_ok[:, None] & (offs_d[None, :] < D)
        tl.store(
            out_ptr + row_off[:, None] + offs_d[None, :], o.to(out_ptr.dtype.element_ty), mask=mask
        )
    elif OUT_KIND == 1:
        so = tl.load(oscale_ptr).to(tl.float32)
        inv = tl.math.div_rn(tl.full([], 1.0, tl.float32), so)
        mask = row_ok[:, None] & (offs_d[None, :] < D)
        tl.store(out_ptr + row_off[:, None] + offs_d[None, :], e4m3_sat(o * inv), mask=mask)
    else:
        g = tl.load(oscale_ptr).to(tl.float32)
        packed, sbits = nvfp4_encode_blocks(o, g, DP // 16)
        row = row_off // NV_K
        c0 = row_off % NV_K
        offs_j = tl.arange(0, DP // 2)
        pmask = row_ok[:, None] & (offs_j[None, :] < D // 2)
        tl.store(
            out_ptr + row[:, None] * (NV_K // 2) + (c0 // 2)[:, None] + offs_j[None, :],
            packed,
            mask=pmask,
        )
        offs_b = tl.arange(0, DP // 16)
        smask = row_ok[:, None] & (offs_b[None, :] < D // 16)
        soff = swizzled_offset(row[:, None], (c0 // 16)[:, None] + offs_b[None, :], NV_KBPAD // 4)
        tl.store(sf_ptr + soff, sbits, mask=smask)


def zero_scale_padding(sf: torch.Tensor, m: int, kblocks: int) -> None:
    """Zeroes the padding bytes of a swizzled block-scale tensor for an ``[m, 16*kblocks]``
    output before a kernel writes its real bytes (stream-ordered; no host sync)."""
    mp, kbp = sf.shape
    flat = sf.view(torch.uint8).view(-1)
    if kbp != kblocks:
        flat.zero_()
    elif mp != m:  # only the last 128-row tile holds padding rows; it is contiguous
        flat[(mp - 128) * kbp :].zero_()
