"""The output epilogue of the Triton attention kernels (prefill, decode, the split merge):
``store_attention_acc`` writes ``acc * row_scale`` as 16/32-bit, FP8 or NVFP4 with the
helpers of ``formats.py`` (the Gluon kernel does the same arithmetic in its own layouts).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .formats import block_amax, e4m3, nvfp4_block_scale, pack_e2m1, swizzled_offset


@triton.jit
def nvfp4_encode_acc(acc, row_scale, g, NB: tl.constexpr):
    """NVFP4 of the rows ``o = acc * row_scale`` (fp32 ``[R, NB*16]``, ``[R]``, ``row_scale >= 0``),
    about 12 ALU operations per element. Returns (packed ``[R, NB*8]`` uint8, scale bytes
    ``[R, NB]``).
    """
    R: tl.constexpr = acc.shape[0]
    ab = tl.reshape(acc, (R, NB, 16))
    # block math on [R, NB] with the row scale from the MMA layout: the compiler gives it a
    # compact layout (4 blocks a thread, not 16); fl(max|a| * s) == max fl(|a| * s), s >= 0
    amax = block_amax(ab) * row_scale[:, None]
    inv, sbits = nvfp4_block_scale(amax, g)
    # one multiply per element: (acc * row_scale) * inv as acc * (row_scale * inv), <= 1 ulp
    return pack_e2m1(ab * (inv * row_scale[:, None])[:, :, None]), sbits


@triton.jit
def store_attention_acc(
    acc, row_scale, out_off, nv_row, nv_col, row_ok, out_ptr, oscale_ptr, sf_ptr,
    D, NV_K, NV_KBPAD, OUT_KIND: tl.constexpr, DP: tl.constexpr,
):  # fmt: skip
    """Writes the attention rows ``acc * row_scale`` (fp32 ``[R, DP]``, ``[R]``) in the requested
    format (one multiply per element, hardware e4m3 saturation, no 64-bit division).

    OUT_KIND 0: ``out_ptr``'s dtype; 1: FP8 with dequant scale ``oscale_ptr``; 2: NVFP4 with
    encode global scale ``oscale_ptr``, packed bytes to ``out_ptr`` and swizzled scale bytes
    (uint8) to ``sf_ptr``. ``out_off`` (int64 ``[R]``): each row's element offset in the
    output layout (OUT_KIND 0 and 1, contiguous along D); ``nv_row`` / ``nv_col`` (``[R]``):
    each row's row and first column in the 2-D ``[M, NV_K]`` view (OUT_KIND 2).
    """
    offs_d = tl.arange(0, DP)
    if OUT_KIND == 2:
        g = tl.load(oscale_ptr).to(tl.float32)
        packed, sbits = nvfp4_encode_acc(acc, row_scale, g, DP // 16)
        nv_row = nv_row.to(tl.int64)
        offs_j = tl.arange(0, DP // 2)
        pmask = row_ok[:, None] & (offs_j[None, :] < D // 2)
        prow = nv_row * (NV_K // 2) + nv_col // 2
        tl.store(out_ptr + prow[:, None] + offs_j[None, :], packed, mask=pmask)
        offs_b = tl.arange(0, DP // 16)
        smask = row_ok[:, None] & (offs_b[None, :] < D // 16)
        soff = swizzled_offset(
            nv_row[:, None], (nv_col // 16)[:, None] + offs_b[None, :], NV_KBPAD // 4
        )
        tl.store(sf_ptr + soff, sbits, mask=smask)
    else:
        mask = row_ok[:, None] & (offs_d[None, :] < D)
        ptrs = out_ptr + out_off[:, None] + offs_d[None, :]
        if OUT_KIND == 1:
            inv = tl.math.div_rn(tl.full([], 1.0, tl.float32), tl.load(oscale_ptr).to(tl.float32))
            o = acc * (row_scale * inv)[:, None]
            tl.store(ptrs, e4m3(o), mask=mask)
        else:
            o = acc * row_scale[:, None]
            tl.store(ptrs, o.to(out_ptr.dtype.element_ty), mask=mask)
