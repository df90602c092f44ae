"""Two values a word: the NVFP4 norm / activation kernels read their 16-bit (or fp32) inputs
as int32 (int64) words of two elements (``split_pairs``), multiply and add a word's two values
with one packed instruction (``packed_products``, ``packed_sums``) and store an NVFP4 tile of
even / odd values (``store_nvfp4_pairs``). Used by ``kernels.py``."""

from __future__ import annotations

import triton
import triton.language as tl

from ..formats import (
    FLT_MAX,
    amax_along,
    e2m1_byte_of_products,
    nan_max,
    nvfp4_block_scale,
    scaled_for_e2m1,
    swizzled_col_offset,
    swizzled_row_offset,
)

# global scales whose block multipliers (``g / sf``, 0 or in ``[g * 2**-9, g * 2**9]``) the
# NVFP4 encode folds into its rounding (``e2m1_byte_of_products``: ``2 * inv`` finite,
# ``inv / 2`` normal or zero); outside, a multiply first (``scaled_for_e2m1``)
_G_FUSED_MIN = tl.constexpr(2.0**-116)
_G_FUSED_END = tl.constexpr(2.0**118)


@triton.jit
def split_pairs(w, DT: tl.constexpr):
    """The two floats of dtype ``DT`` in each word of ``w`` (int32 words of 16-bit floats,
    int64 words of fp32; the even element in the low half) as fp32 ``(even, odd)``."""
    if DT.primitive_bitwidth == 16:
        lo = w.to(tl.uint16).to(DT, bitcast=True)
        hi = (w >> 16).to(tl.uint16).to(DT, bitcast=True)
    else:
        lo = w.to(tl.uint32).to(tl.float32, bitcast=True)
        hi = (w >> 32).to(tl.uint32).to(tl.float32, bitcast=True)
    return lo.to(tl.float32), hi.to(tl.float32)


@triton.jit
def split_pairs_f32(w, DT: tl.constexpr):
    """``split_pairs`` for values that feed only fp32 arithmetic: bf16 halves by a shift and
    a mask (one instruction a value). Where a value feeds a 16-bit product or sum rounded back
    to its dtype, ``split_pairs`` lets the compiler keep that operation in packed bf16."""
    if DT == tl.bfloat16:
        lo = (w << 16).to(tl.float32, bitcast=True)
        hi = (w & -65536).to(tl.float32, bitcast=True)
    else:
        lo, hi = split_pairs(w, DT)
    return lo, hi


@triton.jit
def join_pairs(lo, hi, DT: tl.constexpr):
    """The words of ``split_pairs`` from fp32 values ``lo`` / ``hi`` rounded to ``DT``."""
    if DT.primitive_bitwidth == 16:
        a = lo.to(DT).to(tl.uint16, bitcast=True).to(tl.int32) & 0xFFFF
        b = hi.to(DT).to(tl.uint16, bitcast=True).to(tl.int32)
        w = a | (b << 16)
    else:
        a = lo.to(tl.uint32, bitcast=True).to(tl.int64) & 0xFFFFFFFF
        b = hi.to(tl.uint32, bitcast=True).to(tl.int64)
        w = a | (b << 32)
    return w


@triton.jit
def block_words(kb):
    """The ``[NB, 8]`` word indices of block columns ``kb`` (a block's 16 values are 8 words;
    also the packed bytes' columns: a word's two values are one byte)."""
    return kb[:, None] * 8 + tl.arange(0, 8)[None, :]


@triton.jit
def unanalysed(x):
    """``x`` (int32) through an identity the compiler cannot see through. The swizzled scale
    store indexes with it: knowing four consecutive blocks' bytes adjacent, the compiler
    would regroup the bytes two to a thread through shared memory and two barriers first;
    one byte a thread, they go out from the threads that computed them."""
    return tl.inline_asm_elementwise(
        "mov.b32 $0, $1;", "=r,r", [x], dtype=tl.int32, is_pure=True, pack=1
    )


@triton.jit
def store_nvfp4_pairs(
    ze, zo, row, kb, K: tl.constexpr, KB_PAD: tl.constexpr, g, packed_ptr, scale_ptr,
    SWIZZLE: tl.constexpr, FULL: tl.constexpr,
):  # fmt: skip
    """NVFP4 of the even / odd values ``ze`` / ``zo`` (fp32 ``[NB, 8]``: block columns ``kb``
    of row ``row``) with the attention epilogues' block scale (``nvfp4_block_scale``: the
    scale byte of ``quant_ref.nvfp4_quant_ref``, the encode multiplier within about 2 ulp of
    its ``1 / (sf / g)``): stores the packed bytes of the real block columns (< K/16) and
    their scale bytes, with ``SWIZZLE`` also zeros in the layout's padding columns (up to
    ``KB_PAD``); ``FULL``: every column of ``kb`` is real (no masks). Each value's product
    with the multiplier is rounded once, to its e2m1 code (``e2m1_byte_of_products``), for
    global scales in ``[2**-116, 2**118)``; outside them it is rounded to fp32 first, and a
    multiplier clamped to FLT_MAX (a global scale of ``2**118`` or more) still sends every
    nonzero value to +-6 and keeps +-0, as the reference's infinite one does
    (``scaled_for_e2m1``)."""
    inv, sbits = nvfp4_block_scale(nan_max(amax_along(ze, 1), amax_along(zo, 1)), g)
    k = inv[:, None]
    if (g < _G_FUSED_MIN) | (g >= _G_FUSED_END):
        big = tl.where(k == FLT_MAX, FLT_MAX, 1.0)
        ze = scaled_for_e2m1(ze, k, big, g)
        zo = scaled_for_e2m1(zo, k, big, g)
        k = tl.full(k.shape, 1.0, tl.float32)
    packed = e2m1_byte_of_products(ze, zo, k).to(tl.uint8)
    row64 = row.to(tl.int64)
    pcols = block_words(kb)
    if SWIZZLE:
        soff = swizzled_row_offset(row64, KB_PAD // 4) + swizzled_col_offset(unanalysed(kb))
    else:
        soff = row64 * (K // 16) + kb
    if FULL:
        tl.store(packed_ptr + row64 * (K // 2) + pcols, packed)
        tl.store(scale_ptr + soff, sbits.to(tl.uint8))
    else:
        real = kb < K // 16
        tl.store(packed_ptr + row64 * (K // 2) + pcols, packed, mask=real[:, None])
        sbits = tl.where(real, sbits, 0).to(tl.uint8)
        tl.store(scale_ptr + soff, sbits, mask=(kb < KB_PAD) if SWIZZLE else real)


def _products_asm(t: str) -> tl.constexpr:
    """``packed_products``' PTX for the 16-bit type ``t`` (``bf16`` or ``f16``)."""
    return tl.constexpr(
        f"{{.reg .b32 p, z; cvt.rn.{t}x2.f32 p, $2, $1; mov.b32 z, 0x80008000;"
        f" fma.rn.{t}x2 $0, p, $3, z;}}"
    )


_PRODUCTS_BF16 = _products_asm("bf16")
_PRODUCTS_F16 = _products_asm("f16")


@triton.jit
def packed_products(ae, ao, w, DT: tl.constexpr):
    """The word of 16-bit ``DT`` pairs ``DT(ae) * w_even`` (low half) and ``DT(ao) * w_odd``
    (high half) of fp32 ``ae`` / ``ao`` and the ``split_pairs`` words ``w``: ``cvt.rn`` rounds
    the two values into one word and one ``fma.rn`` with a ``-0`` addend (``mul.rn.bf16x2``
    needs sm_90; the kernels run from sm_89, and ``-0`` keeps the sign of a zero product)
    multiplies it by ``w``, each product rounded once to DT: ``(DT(a) * w).to(DT)`` of a
    word's two values."""
    if DT == tl.bfloat16:
        asm: tl.constexpr = _PRODUCTS_BF16
    else:
        asm: tl.constexpr = _PRODUCTS_F16
    return tl.inline_asm_elementwise(
        asm, "=r,f,f,r", [ae, ao, w], dtype=tl.int32, is_pure=True, pack=1
    )


def _sums_asm(t: str, one: int) -> tl.constexpr:
    """``packed_sums``' PTX for the 16-bit type ``t`` whose 1.0 has the bits ``one``."""
    return tl.constexpr(f"{{.reg .b32 one; mov.b32 one, {one:#x}; fma.rn.{t}x2 $0, $1, one, $2;}}")


_SUMS_BF16 = _sums_asm("bf16", 0x3F803F80)
_SUMS_F16 = _sums_asm("f16", 0x3C003C00)


@triton.jit
def packed_sums(a, b, DT: tl.constexpr):
    """The words of ``DT(a + b)`` for two ``split_pairs`` words of 16-bit ``DT``: one packed
    ``fma.rn`` (``a * 1 + b``, each half rounded once; ``add.rn.bf16x2`` needs sm_90). Equal
    to the fp32 sum rounded to DT, as PyTorch computes it: fp32 holds more than twice DT's
    precision plus two bits, so the two roundings give the correctly rounded sum."""
    if DT == tl.bfloat16:
        asm: tl.constexpr = _SUMS_BF16
    else:
        asm: tl.constexpr = _SUMS_F16
    return tl.inline_asm_elementwise(asm, "=r,r,r", [a, b], dtype=tl.int32, is_pure=True, pack=1)
