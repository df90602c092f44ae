"""Device helpers for the output formats of docs/numerics.md, one per format, shared by every
Triton and Gluon kernel (quant, prefill, decode, norm / act): FP8 encode (``e4m3``), e2m1
encode and decode (``e2m1_byte``, ``e2m1_value``), the NVFP4 block amax (``block_amax``,
``amax_along``, ``nan_max``), the two block scale forms (``nvfp4_block_scale_exact`` for the
quant ops, ``nvfp4_block_scale`` for the attention epilogues), nibble packing
(``pack_e2m1``), the swizzled scale offsets (``swizzled_offset``) and the zeros of that
layout's padding rows (``zero_sf_pad``).

Imported only from the kernel modules, never at ``import graphfuse``.
"""

from __future__ import annotations

import triton
import triton.language as tl

FLT_MAX = tl.constexpr(3.4028234663852886e38)
_G_ONE_MULTIPLY = tl.constexpr(2.0**118)  # scaled_for_e2m1


@triton.jit
def e4m3(v):
    """fp32 -> float8_e4m3fn by the hardware ``cvt.rn.satfinite`` (sm_89+): rne, saturating
    at +-448 (infinities too), NaN kept -- docs/numerics.md's ``e4m3``."""
    return v.to(tl.float8e4nv)


@triton.jit
def _e2m1_magnitude(v, k):
    """``M + |code(v * k)|`` in fp32 (``M = 1.5 * 2**23``, bits ``0x4B400000``) for ``k >= 0``:
    the low byte of its bits is the 3-bit e2m1 magnitude code of the exact product ``v * k``,
    rne, saturating at 6.

    ``code(a) = min(rint(2a), rint(a) + 2, rint(a/2) + 4, 7)`` (the e2m1 grid has steps 0.5,
    1, 2 on [0, 2), [2, 4), [4, 6]; ``rint`` rounds half to even as docs/numerics.md's table
    does); each ``rint(c * a) + j`` is one multiply-add ``|v| * (c * k) + (j + M)`` rounded once
    in fp32 (sums in ``[2**23, 2**24)`` round to integers), exact where ``2 * k`` is finite and
    ``k / 2`` is normal or zero. With ``k = 1`` (a constant) these are one multiply-add or add
    a segment.
    """
    a = tl.abs(v)
    m: tl.constexpr = 12582912.0
    t = tl.minimum(tl.fma(a, k * 2.0, m), tl.fma(a, k, m + 2.0))
    t = tl.minimum(t, tl.fma(a, k * 0.5, m + 4.0))
    return tl.minimum(t, m + 7.0)


@triton.jit
def _sign_bit(v):
    """The sign bit of fp32 ``v`` as uint32 0 / 1 (a multiply-high, off the logic pipe)."""
    return tl.umulhi(v.to(tl.uint32, bitcast=True), 2)


@triton.jit
def e2m1_byte_of_products(lo, hi, k):
    """The packed NVFP4 byte of the exact products ``lo * k`` / ``hi * k`` (fp32, ``k >= 0``
    with ``2 * k`` finite and ``k / 2`` normal or zero, broadcast by the caller), each rounded
    once to the e2m1 grid (rne, saturating at 6, sign in bit 3), ``lo``'s code in the low
    nibble, as the low 8 bits of a uint32 (the caller's ``.to(tl.uint8)`` drops the rest).
    Integer multiply-adds only: the magnitude codes are the low bytes of
    ``_e2m1_magnitude``'s bits (``0x4B400000 * 16`` has a zero low byte too), the signs
    ``lo``'s and ``hi``'s (``_sign_bit``; ``k`` is not negative)."""
    mlo = _e2m1_magnitude(lo, k).to(tl.uint32, bitcast=True)
    mhi = _e2m1_magnitude(hi, k).to(tl.uint32, bitcast=True)
    return mlo + mhi * 16 + _sign_bit(lo) * 8 + _sign_bit(hi) * 128


@triton.jit
def e2m1_byte(lo, hi):
    """The packed NVFP4 byte of fp32 ``lo`` / ``hi``: ``e2m1_byte_of_products`` with ``k = 1``.
    Equal to ``quant_ref.e2m1_codes`` for every non-NaN value (a NaN occurs only in a NaN
    block, whose nibbles docs/numerics.md leaves unspecified)."""
    return e2m1_byte_of_products(lo, hi, 1.0)


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
def nan_max(a, b):
    """Elementwise maximum that propagates NaN."""
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def amax_along(x, AXIS: tl.constexpr):
    """``max |x|`` along ``AXIS``, NaN if any element is NaN."""
    return tl.reduce(tl.abs(x), AXIS, nan_max)


@triton.jit
def block_amax(xb):
    """``max |x|`` over the last axis of ``[R, NB, 16]`` (the 16 elements of an NVFP4 block),
    NaN if any is."""
    return amax_along(xb, 2)


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
def _scale_byte(sf8, amax):
    """The stored block-scale byte: ``sf8``'s, or 0x7F for a NaN block."""
    return tl.where(amax != amax, 0x7F, sf8.to(tl.uint8, bitcast=True)).to(tl.uint8)


@triton.jit
def nvfp4_block_scale_exact(amax, g):
    """docs/numerics.md's NVFP4 block scale, bit-exact with ``quant_ref.nvfp4_quant_ref`` (the
    quant op): ``sf = e4m3(g * (amax / 6))``, encode multiplier ``inv = 1 / (sf / g)`` (0 for
    a zero scale), every division ``div_rn``. Returns (``inv``, ``big``, the scale byte):
    encode a value ``x`` as the e2m1 code of ``x * inv * big`` (``scaled_for_e2m1``). An
    infinite or NaN ``inv`` (``g = inf``, or ``g > 2**118`` with a tiny scale) becomes FLT_MAX,
    and ``big`` is FLT_MAX where ``inv`` was infinite, else 1: every nonzero ``x`` still
    overflows to +-inf (code +-6) and +-0 stays +-0 with no per-element test (``0 * inf``
    would be NaN)."""
    one = tl.full(amax.shape, 1.0, tl.float32)
    sf8 = e4m3(g * tl.math.div_rn(amax, one * 6.0))
    sf = sf8.to(tl.float32)
    inv = tl.where(sf == 0.0, 0.0, tl.math.div_rn(one, tl.math.div_rn(sf, one * g)))
    big = tl.where(inv > FLT_MAX, FLT_MAX, 1.0)
    return tl.where(inv < FLT_MAX, inv, FLT_MAX), big, _scale_byte(sf8, amax)


@triton.jit
def scaled_for_e2m1(x, inv, big, g):
    """``x * inv * big`` with an encode multiplier ``inv`` clamped to FLT_MAX and ``big``,
    FLT_MAX where the clamp took an infinite one, else 1 (``nvfp4_block_scale_exact``'s pair,
    or ``nvfp4_block_scale``'s ``inv`` and that ``big``; broadcast to ``x`` by the caller),
    one multiply when the global scale ``g`` is below ``2**118``: a nonzero e4m3 scale is at
    least ``2**-9``, so neither form's ``inv`` reaches ``2**127``, none was clamped and every
    ``big`` is 1 (``g`` is one value, so the branch is uniform)."""
    if g < _G_ONE_MULTIPLY:
        y = x * inv
    else:
        y = x * inv * big
    return y


@triton.jit
def nvfp4_block_scale(amax, g):
    """The NVFP4 block scale in the epilogue form every attention kernel (Triton and Gluon)
    uses: ``sf = e4m3(g * amax / 6)`` (``div6_rn``); ``inv = g * rsqrt(sf * sf)`` (sf is an
    e4m3 value, so sf * sf is exact and normal; within about 2 ulp of ``1 / (sf / g)``), 0
    for a zero scale and clamped to FLT_MAX (no ``0 * inf``). Returns (``inv``, the scale
    byte, 0x7F for a NaN block). Elementwise only, so Gluon kernels call it too.
    """
    sf8 = e4m3(g * div6_rn(amax))
    sf = sf8.to(tl.float32)
    inv = g * tl.math.rsqrt(sf * sf)
    inv = tl.where(sf == 0.0, 0.0, tl.minimum(inv, FLT_MAX))
    return inv, _scale_byte(sf8, amax)


@triton.jit
def pack_e2m1(v):
    """The packed NVFP4 bytes ``[R, NB*8]`` (uint8, even element in the low nibble) of the
    block-scaled values ``v`` (fp32 ``[R, NB, 16]``)."""
    R: tl.constexpr = v.shape[0]
    NB: tl.constexpr = v.shape[1]
    lo, hi = tl.split(tl.reshape(v, (R, NB * 8, 2)))
    return e2m1_byte(lo, hi).to(tl.uint8)


@triton.jit
def swizzled_row_offset(m, n_ktiles):
    """The part of ``swizzled_offset`` that depends on the row ``m`` only (a kernel that
    stores the same block columns for many rows computes ``swizzled_col_offset`` once)."""
    return (m // 128) * n_ktiles * 512 + (m % 32) * 16 + ((m % 128) // 32) * 4


@triton.jit
def swizzled_col_offset(k):
    """The part of ``swizzled_offset`` that depends on the block column ``k`` only."""
    return (k // 4) * 512 + (k % 4)


@triton.jit
def swizzled_offset(m, k, n_ktiles):
    """Flat byte offset of block scale (row m, block column k) in the swizzled layout:
    512-byte tiles of 128 rows x 4 block columns, ``n_ktiles`` tiles a row tile."""
    return swizzled_row_offset(m, n_ktiles) + swizzled_col_offset(k)


@triton.jit
def zero_sf_pad(SF, M, KBPAD, pid, nprog, PADW: tl.constexpr):
    """Zeroes the swizzled NVFP4 scale bytes of padding rows ``M .. round_up(M, 128) - 1``
    (every column of ``KBPAD``, a multiple of 4); program ``pid`` of ``nprog`` takes an equal
    share. The padding rows all lie in the last 128-row tile, whose bytes are contiguous:
    ``KBPAD / 4`` column tiles of 128 aligned 32-bit words, word ``w`` of a column tile
    holding the 4 scales of row ``(w % 4) * 32 + w // 4`` of the row tile. So the zeros go out
    as consecutive words, masked to the padding rows, with no division by a runtime value.
    The real rows are written by the quantizer (no byte is written twice), so any program of
    the launch may do this."""
    if M % 128 != 0:  # (M a multiple of 128: no padding rows)
        row0 = M - M % 128
        n = (KBPAD // 4) * 128  # words of the last row tile
        per = (n + nprog - 1) // nprog
        lo = pid * per
        hi = tl.minimum(lo + per, n)
        SFW = SF.to(tl.pointer_type(tl.int32), bitcast=True) + row0.to(tl.int64) * (KBPAD // 4)
        for s in tl.range(lo, hi, PADW):
            offs = s + tl.arange(0, PADW)
            w = offs & 127  # offs >= 0: the bit forms of % 128, % 4 * 32 and // 4
            r = row0 + ((w & 3) << 5) + (w >> 2)
            tl.store(SFW + offs, tl.zeros([PADW], tl.int32), mask=(offs < hi) & (r >= M))
