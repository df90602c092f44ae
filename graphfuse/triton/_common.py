"""Triton device helpers shared by the quant and attention kernels (docs/numerics.md formats).

Imported only from the Triton kernel modules, never at ``import graphfuse``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

FP8_MAX = 448.0


@triton.jit
def e4m3_sat(v):
    """fp32 -> float8_e4m3fn with docs/numerics.md's rules: rne, saturating at +-448, NaN kept."""
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


def check_scale(op: str, name: str, s: torch.Tensor, device: torch.device) -> None:
    """Raises ValueError unless ``s`` is a one-element floating tensor on ``device``."""
    if s.numel() != 1 or not s.is_floating_point() or s.device != device:
        raise ValueError(
            f"graphfuse::{op}: {name} must be a one-element floating tensor on {device}, "
            f"got shape {tuple(s.shape)}, dtype {s.dtype}, device {s.device}"
        )


@triton.jit
def e4m3_hw(v):
    """fp32 -> float8_e4m3fn by the hardware ``cvt.rn.satfinite`` (sm_89+): rne, saturating at
    +-448, NaN kept (as 0x7F) -- bit-identical to ``e4m3_sat`` on the GPU without its clamp."""
    return v.to(tl.float8e4nv)


@triton.jit
def _max_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def div6_rn(x):
    """``div_rn(x, 6)`` for x >= 0 by one multiply and two FMAs (a remainder correction).

    Bit-exact for +inf, NaN and every x whose quotient is a normal fp32 (checked exhaustively
    over all non-negative fp32); for x < 6 * 2**-126 it may be off by one denormal step.
    """
    c: tl.constexpr = 0.1666666716337204  # fl32(1/6)
    q0 = x * c
    r = tl.fma(q0, -6.0, x)
    return tl.where(x < float("inf"), tl.fma(r, c, q0), x)  # inf and NaN pass through


@triton.jit
def e2m1_code_fast(v):
    """``e2m1_code`` (int32 0..15) in 7 ALU operations, bit-identical for every non-NaN v.

    ``code(|v|) = min(rint(2a), rint(a) + 2, rint(a/2) + 4, 7)`` (the e2m1 grid has steps 0.5,
    1, 2 on [0, 2), [2, 4), [4, 6]; ``rint`` rounds half to even as docs/numerics.md's table does);
    each ``rint(y) + k`` is the low bits of ``y + k + 1.5*2**23`` rounded once in fp32.
    """
    a = tl.abs(v)
    m: tl.constexpr = 12582912.0  # 1.5 * 2**23: sums in [2**23, 2**24) round to integers
    t = tl.minimum(tl.fma(a, 2.0, m), a + (m + 2.0))
    t = tl.minimum(t, tl.fma(a, 0.5, m + 4.0))
    t = tl.minimum(t, m + 7.0)
    mag = t.to(tl.int32, bitcast=True) & 7
    sign = (v.to(tl.uint32, bitcast=True) >> 28) & 8
    return mag | sign.to(tl.int32)


@triton.jit
def nvfp4_block_scale(amax, g):
    """The NVFP4 block scale of docs/numerics.md for block amaxes ``amax`` (fp32, NaN kept) and
    global scale ``g``, in the epilogue form every attention kernel (Triton and Gluon) uses:
    returns (the scale as e4m3 ``sf8``, the encode multiplier ``inv``, the scale byte).

    ``sf8 = e4m3(g * amax / 6)`` (``div6_rn``, hardware rne + satfinite); ``inv = g *
    rsqrt(sf * sf)`` (sf is an e4m3 value, so sf * sf is exact and normal; within about 2 ulp
    of ``1 / (sf / g)``), 0 for a zero scale and clamped to FLT_MAX (no ``0 * inf``); the
    byte is 0x7F for a NaN block. Elementwise only, so Gluon kernels call it too.
    """
    sf8 = e4m3_hw(g * div6_rn(amax))
    sf = sf8.to(tl.float32)
    inv = g * tl.math.rsqrt(sf * sf)
    inv = tl.where(sf == 0.0, 0.0, tl.minimum(inv, 3.4028234663852886e38))
    sbits = tl.where(amax != amax, 0x7F, sf8.to(tl.uint8, bitcast=True)).to(tl.uint8)
    return inv, sbits


@triton.jit
def nvfp4_encode_acc(acc, row_scale, g, NB: tl.constexpr):
    """NVFP4 of the rows ``o = acc * row_scale`` (fp32 ``[R, NB*16]``, ``[R]``, ``row_scale >= 0``):
    the epilogue form of ``nvfp4_encode_blocks``, about 12 ALU operations per element (block
    scale by ``nvfp4_block_scale``, codes by ``e2m1_code_fast``).
    Returns (packed ``[R, NB*8]`` uint8, scale bytes ``[R, NB]``).
    """
    R: tl.constexpr = acc.shape[0]
    ab = tl.reshape(acc, (R, NB, 16))
    # block math on [R, NB] with the row scale from the MMA layout: the compiler gives it a
    # compact layout (4 blocks a thread, not 16); fl(max|a| * s) == max fl(|a| * s), s >= 0
    amax = tl.reduce(tl.abs(ab), 2, _max_nan) * row_scale[:, None]
    inv, sbits = nvfp4_block_scale(amax, g)
    # one multiply per element: (acc * row_scale) * inv as acc * (row_scale * inv), <= 1 ulp
    v = ab * (inv * row_scale[:, None])[:, :, None]
    lo, hi = tl.split(tl.reshape(e2m1_code_fast(v), (R, NB * 8, 2)))
    packed = (lo | (hi << 4)).to(tl.uint8)
    return packed, sbits


@triton.jit
def store_attention_acc(
    acc,
    row_scale,
    out_off,
    nv_row,
    nv_col,
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
    """Writes the attention rows ``acc * row_scale`` (fp32 ``[R, DP]``, ``[R]``) in the requested
    format: the one epilogue of the Triton prefill and decode kernels (one multiply per
    element, hardware e4m3 saturation, ``nvfp4_encode_acc``, no 64-bit division).

    OUT_KIND 0: ``out_ptr``'s dtype; 1: FP8 with dequant scale ``oscale_ptr``; 2: NVFP4 with
    encode global scale ``oscale_ptr``, packed bytes to ``out_ptr`` and swizzled scale bytes
    (uint8) to ``sf_ptr``. ``out_off`` (int64 ``[R]``): each row's element offset in the
    output layout (OUT_KIND 0 and 1, contiguous along D); ``nv_row`` / ``nv_col`` (``[R]``):
    each row's row and first column in the 2-D ``[M, NV_K]`` view (OUT_KIND 2).
    """
    offs_d = tl.arange(0, DP)
    if OUT_KIND == 0:
        mask = row_ok[:, None] & (offs_d[None, :] < D)
        o = acc * row_scale[:, None]
        tl.store(
            out_ptr + out_off[:, None] + offs_d[None, :], o.to(out_ptr.dtype.element_ty), mask=mask
        )
    elif OUT_KIND == 1:
        so = tl.load(oscale_ptr).to(tl.float32)
        inv = tl.math.div_rn(tl.full([], 1.0, tl.float32), so)
        mask = row_ok[:, None] & (offs_d[None, :] < D)
        o = acc * (row_scale * inv)[:, None]
        tl.store(out_ptr + out_off[:, None] + offs_d[None, :], e4m3_hw(o), mask=mask)
    else:
        g = tl.load(oscale_ptr).to(tl.float32)
        packed, sbits = nvfp4_encode_acc(acc, row_scale, g, DP // 16)
        nv_row = nv_row.to(tl.int64)
        offs_j = tl.arange(0, DP // 2)
        pmask = row_ok[:, None] & (offs_j[None, :] < D // 2)
        tl.store(
            out_ptr + nv_row[:, None] * (NV_K // 2) + (nv_col // 2)[:, None] + offs_j[None, :],
            packed,
            mask=pmask,
        )
        offs_b = tl.arange(0, DP // 16)
        smask = row_ok[:, None] & (offs_b[None, :] < D // 16)
        soff = swizzled_offset(
            nv_row[:, None], (nv_col // 16)[:, None] + offs_b[None, :], NV_KBPAD // 4
        )
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
