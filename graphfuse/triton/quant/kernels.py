"""The quant op kernels (launched by ``launch.py``); format helpers from ``formats.py``."""

from __future__ import annotations

import triton
import triton.language as tl

from ..formats import (
    block_amax,
    e2m1_value,
    e4m3,
    nvfp4_block_scale_exact,
    pack_e2m1,
    scaled_for_e2m1,
    swizzled_offset,
)


@triton.jit
def fp8_quant_kernel(x_ptr, s_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    s = tl.load(s_ptr).to(tl.float32)
    inv = tl.math.div_rn(tl.full([], 1.0, tl.float32), s)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, e4m3(x * inv), mask=mask)


@triton.jit
def fp8_dequant_kernel(q_ptr, s_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    s = tl.load(s_ptr).to(tl.float32)
    q = tl.load(q_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (q * s).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def fp8_upcast_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """``out = x`` for float8_e4m3fn ``x`` and a 16-bit ``out``: the hardware conversion (exact;
    every e4m3 value is a float16 and a bfloat16 value)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def fp8_upcast_rows_kernel(
    x_ptr, out_ptr, S, D, sb, sh, ss, sd, BS: tl.constexpr, BD: tl.constexpr
):  # fmt: skip
    """``out[b, h] = x[b, h]`` for one ``[BS, BD]`` tile of the ``(b, h)`` matrix (grid: tiles,
    H, B): ``x`` float8_e4m3fn ``[B, H, S, D]`` with any strides, ``out`` a contiguous 16-bit
    ``[B, H, S, D]``. The loads run along whichever of ``s`` / ``d`` has unit stride, the
    stores along ``d`` (Triton exchanges the layouts through shared memory)."""
    nd = tl.cdiv(D, BD)
    s = (tl.program_id(0) // nd) * BS + tl.arange(0, BS)
    d = (tl.program_id(0) % nd) * BD + tl.arange(0, BD)
    h = tl.program_id(1).to(tl.int64)
    b = tl.program_id(2).to(tl.int64)
    mask = (s[:, None] < S) & (d[None, :] < D)
    src = x_ptr + b * sb + h * sh + s[:, None].to(tl.int64) * ss + d[None, :].to(tl.int64) * sd
    x = tl.load(src, mask=mask, other=0.0)
    row0 = (b * tl.num_programs(1) + h) * S
    dst = out_ptr + (row0 + s[:, None]) * D + d[None, :]
    tl.store(dst, x.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _scale_offsets(rows64, kb, KB, KB_PAD, SWIZZLED: tl.constexpr):
    """Byte offsets of block scales (rows, block columns): swizzled, or linear ``[M, KB]``."""
    if SWIZZLED:
        return swizzled_offset(rows64[:, None], kb[None, :], KB_PAD // 4)
    return rows64[:, None] * KB + kb[None, :]


@triton.jit
def nvfp4_quant_kernel(
    x_ptr, g_ptr, packed_ptr, scale_ptr, M, K, M_PAD, KB_PAD,
    SWIZZLE: tl.constexpr, BM: tl.constexpr, NB: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    kb = tl.program_id(1) * NB + tl.arange(0, NB)  # block columns
    cols = tl.program_id(1) * NB * 16 + tl.arange(0, NB * 16)
    rows64 = rows.to(tl.int64)
    valid = (rows[:, None] < M) & (cols[None, :] < K)
    x = tl.load(x_ptr + rows64[:, None] * K + cols[None, :], mask=valid, other=0.0)
    xb = tl.reshape(x.to(tl.float32), (BM, NB, 16))
    g = tl.load(g_ptr).to(tl.float32)
    inv, big, sbits = nvfp4_block_scale_exact(block_amax(xb), g)
    packed = pack_e2m1(scaled_for_e2m1(xb, inv[:, :, None], big[:, :, None], g))
    pcols = tl.program_id(1) * NB * 8 + tl.arange(0, NB * 8)
    pmask = (rows[:, None] < M) & (pcols[None, :] < K // 2)
    tl.store(packed_ptr + rows64[:, None] * (K // 2) + pcols[None, :], packed, mask=pmask)
    sval = (rows[:, None] < M) & (kb[None, :] < K // 16)
    sbits = tl.where(sval, sbits, 0).to(tl.uint8)  # swizzle padding: zeros
    if SWIZZLE:
        smask = (rows[:, None] < M_PAD) & (kb[None, :] < KB_PAD)
    else:
        smask = sval
    tl.store(scale_ptr + _scale_offsets(rows64, kb, K // 16, KB_PAD, SWIZZLE), sbits, mask=smask)


@triton.jit
def nvfp4_dequant_kernel(
    packed_ptr, scale_ptr, g_ptr, out_ptr, M, K, KB_PAD,
    SWIZZLED: tl.constexpr, BM: tl.constexpr, NB: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    rows64 = rows.to(tl.int64)
    kb = tl.program_id(1) * NB + tl.arange(0, NB)
    pcols = tl.program_id(1) * NB * 8 + tl.arange(0, NB * 8)
    pmask = (rows[:, None] < M) & (pcols[None, :] < K // 2)
    b = tl.load(packed_ptr + rows64[:, None] * (K // 2) + pcols[None, :], mask=pmask, other=0)
    b = b.to(tl.int32)
    codes = tl.reshape(tl.join(b & 15, b >> 4), (BM, NB, 16))
    smask = (rows[:, None] < M) & (kb[None, :] < K // 16)
    soff = _scale_offsets(rows64, kb, K // 16, KB_PAD, SWIZZLED)
    sf = tl.load(scale_ptr + soff, mask=smask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr).to(tl.float32)
    v = e2m1_value(codes) * sf[:, :, None]
    v = tl.math.div_rn(v, tl.full(v.shape, 1.0, tl.float32) * g)
    v = tl.reshape(v, (BM, NB * 16))
    cols = tl.program_id(1) * NB * 16 + tl.arange(0, NB * 16)
    omask = (rows[:, None] < M) & (cols[None, :] < K)
    out = out_ptr + rows64[:, None] * K + cols[None, :]
    tl.store(out, v.to(out_ptr.dtype.element_ty), mask=omask)
