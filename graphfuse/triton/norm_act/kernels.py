"""The norm / activation + quant kernels (launched by ``launch.py``); format helpers from
``formats.py``.

The arithmetic is ``graphfuse/ops/norm_act_ref.py``'s, operation for operation: every
division ``div_rn``, the square root ``sqrt_rn``, ``exp`` the reference's Cody-Waite
reduction and degree-6 polynomial, no fused multiply-add (the launchers compile with
``enable_fp_fusion=False``). The one freedom taken is the order of the sum of squares (a
tree reduction over the row), which docs/numerics.md allows.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..formats import block_amax, e4m3, nvfp4_block_scale_exact, pack_e2m1, swizzled_offset

# exp (norm_act_ref.exp_ref): clamp range, log2(e), ln 2 in two parts, the polynomial
_EXP_LO = tl.constexpr(-104.0)
_EXP_HI = tl.constexpr(89.0)
_LOG2E = tl.constexpr(1.44269504088896341)
_LN2_HI = tl.constexpr(0.693359375)
_LN2_LO = tl.constexpr(-2.12194440e-4)
_P0 = tl.constexpr(1.9875691500e-4)
_P1 = tl.constexpr(1.3981999507e-3)
_P2 = tl.constexpr(8.3334519073e-3)
_P3 = tl.constexpr(4.1665795894e-2)
_P4 = tl.constexpr(1.6666665459e-1)
_P5 = tl.constexpr(5.0000001201e-1)
_RINT = tl.constexpr(12582912.0)  # 1.5 * 2**23: t + _RINT - _RINT rounds |t| < 2**22 to even
# gelu_tanh (norm_act_ref.GELU_BETA2, GELU_KAPPA)
_GELU_BETA2 = tl.constexpr(1.5957691216057308)
_GELU_KAPPA = tl.constexpr(0.044715)

SILU = tl.constexpr(0)
GELU_TANH = tl.constexpr(1)


@triton.jit
def _pow2(k):
    """2^k (fp32) for int32 ``k`` in [-126, 127], from the exponent bits."""
    return ((k + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def exp_poly(v):
    """``norm_act_ref.exp_ref`` of fp32 ``v``: NaN stays NaN, overflow gives inf."""
    v = tl.clamp(v, _EXP_LO, _EXP_HI, propagate_nan=tl.PropagateNan.ALL)
    n = (v * _LOG2E + _RINT) - _RINT
    r = v - n * _LN2_HI
    r = r - n * _LN2_LO
    p = r * _P0 + _P1
    p = p * r + _P2
    p = p * r + _P3
    p = p * r + _P4
    p = p * r + _P5
    y = p * (r * r)
    y = y + r
    y = y + 1.0
    ni = n.to(tl.int32)
    n1 = ni >> 1  # floor(n / 2)
    return y * _pow2(n1) * _pow2(ni - n1)


@triton.jit
def activation(v, ACT: tl.constexpr):
    """``silu`` (``ACT == SILU``) or ``gelu_tanh`` of fp32 ``v``, in fp32:
    ``v / (1 + exp(-k))`` with ``k = v`` or ``sqrt(8/pi) * (v + 0.044715 v^3)``."""
    if ACT == GELU_TANH:
        k = (v + ((v * v) * v) * _GELU_KAPPA) * _GELU_BETA2
    else:
        k = v
    return tl.math.div_rn(v, 1.0 + exp_poly(-k))


@triton.jit
def store_nvfp4(
    z, row, kb0, M, K, KB_PAD, g, packed_ptr, scale_ptr,
    SWIZZLE: tl.constexpr, NB: tl.constexpr,
):  # fmt: skip
    """Quantizes ``z`` (fp32 ``[NB * 16]``: block columns ``kb0 .. kb0 + NB`` of row ``row``)
    to NVFP4 (``quant_ref.nvfp4_quant_ref``'s arithmetic) and stores the packed bytes of the
    real elements (row < M, column < K) and the block-scale bytes, zeros in the padding of the
    swizzled layout (rows up to M_PAD, block columns up to ``KB_PAD``)."""
    zb = tl.reshape(z, (1, NB, 16))
    inv, sbits = nvfp4_block_scale_exact(block_amax(zb), g)
    v = zb * inv[:, :, None]
    packed = tl.reshape(pack_e2m1(tl.where(zb == 0.0, zb, v)), (NB * 8,))
    row64 = row.to(tl.int64)
    pcols = kb0 * 8 + tl.arange(0, NB * 8)
    tl.store(packed_ptr + row64 * (K // 2) + pcols, packed, mask=(row < M) & (pcols < K // 2))
    kb = kb0 + tl.arange(0, NB)
    sbits = tl.where((row < M) & (kb < K // 16), tl.reshape(sbits, (NB,)), 0).to(tl.uint8)
    if SWIZZLE:
        tl.store(scale_ptr + swizzled_offset(row64, kb, KB_PAD // 4), sbits, mask=kb < KB_PAD)
    else:
        tl.store(scale_ptr + row64 * (K // 16) + kb, sbits, mask=(row < M) & (kb < K // 16))


@triton.jit
def rms_norm_row(
    x_ptr, res_ptr, res_out_ptr, w_ptr, row, M, K, sx, sr, eps,
    HAS_RES: tl.constexpr, NORM_DT: tl.constexpr, OUT_DT: tl.constexpr,
    WEIGHT_FIRST: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """RMSNorm of row ``row`` (``norm_act_ref.rms_norm_ref``) as fp32 ``[BLOCK]`` (0 past K).

    With ``HAS_RES`` the row is ``h = x + residual`` rounded to x's dtype, stored to
    ``res_out_ptr`` (contiguous ``[M, K]``). ``WEIGHT_FIRST``: ``(n * w)`` rounded to
    ``NORM_DT``; otherwise ``w * n`` rounded to ``NORM_DT`` first, the product to ``OUT_DT``.
    Rows at or past M read zeros and store nothing."""
    cols = tl.arange(0, BLOCK)
    row64 = row.to(tl.int64)
    mask = (cols < K) & (row < M)
    x = tl.load(x_ptr + row64 * sx + cols, mask=mask, other=0.0)
    if HAS_RES:
        h = (x.to(tl.float32) + tl.load(res_ptr + row64 * sr + cols, mask=mask, other=0.0).to(
            tl.float32
        )).to(x_ptr.dtype.element_ty)  # fmt: skip
        tl.store(res_out_ptr + row64 * K + cols, h, mask=mask)
        v = h.to(tl.float32)
    else:
        v = x.to(tl.float32)
    mean = tl.math.div_rn(tl.sum(v * v, axis=0), tl.cast(K, tl.float32))
    r = tl.math.div_rn(1.0, tl.math.sqrt_rn(mean + eps))
    n = v * r
    w = tl.load(w_ptr + cols, mask=cols < K, other=0.0).to(tl.float32)
    if WEIGHT_FIRST:
        z = (n * w).to(NORM_DT).to(tl.float32)
    else:
        z = (w * n.to(NORM_DT).to(tl.float32)).to(OUT_DT).to(tl.float32)
    return z


@triton.jit
def rms_norm_fp8_kernel(
    x_ptr, res_ptr, res_out_ptr, w_ptr, s_ptr, out_ptr, M, K, sx, sr, eps,
    HAS_RES: tl.constexpr, NORM_DT: tl.constexpr, OUT_DT: tl.constexpr,
    WEIGHT_FIRST: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """One program per row: RMSNorm (plus the residual add), then ``e4m3(z * (1/scale))``
    into ``out_ptr`` (contiguous ``[M, K]``)."""
    row = tl.program_id(0)
    z = rms_norm_row(
        x_ptr, res_ptr, res_out_ptr, w_ptr, row, M, K, sx, sr, eps,
        HAS_RES, NORM_DT, OUT_DT, WEIGHT_FIRST, BLOCK,
    )  # fmt: skip
    inv = tl.math.div_rn(1.0, tl.load(s_ptr).to(tl.float32))
    cols = tl.arange(0, BLOCK)
    tl.store(out_ptr + row.to(tl.int64) * K + cols, e4m3(z * inv), mask=cols < K)


@triton.jit
def rms_norm_nvfp4_kernel(
    x_ptr, res_ptr, res_out_ptr, w_ptr, g_ptr, packed_ptr, scale_ptr, M, K, KB_PAD, sx, sr, eps,
    HAS_RES: tl.constexpr, NORM_DT: tl.constexpr, OUT_DT: tl.constexpr,
    WEIGHT_FIRST: tl.constexpr, SWIZZLE: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """One program per row (per padded row with ``SWIZZLE``: programs past M write the zero
    padding of the scales): RMSNorm (plus the residual add), then NVFP4 of the row."""
    row = tl.program_id(0)
    z = rms_norm_row(
        x_ptr, res_ptr, res_out_ptr, w_ptr, row, M, K, sx, sr, eps,
        HAS_RES, NORM_DT, OUT_DT, WEIGHT_FIRST, BLOCK,
    )  # fmt: skip
    g = tl.load(g_ptr).to(tl.float32)
    store_nvfp4(z, row, 0, M, K, KB_PAD, g, packed_ptr, scale_ptr, SWIZZLE, BLOCK // 16)


@triton.jit
def act_and_mul_chunk(gate_ptr, up_ptr, row, cols, mask, sg, su, ACT: tl.constexpr):
    """``activation(gate) * up`` at (``row``, ``cols``) in gate's dtype T
    (``norm_act_ref.act_and_mul_ref``): the activation in fp32 rounded to T, the product
    rounded to T; returned in fp32 (0 where ``mask`` is false)."""
    dt = gate_ptr.dtype.element_ty
    row64 = row.to(tl.int64)
    gv = tl.load(gate_ptr + row64 * sg + cols, mask=mask, other=0.0).to(tl.float32)
    uv = tl.load(up_ptr + row64 * su + cols, mask=mask, other=0.0).to(tl.float32)
    a = activation(gv, ACT).to(dt).to(tl.float32)
    return (a * uv).to(dt).to(tl.float32)


@triton.jit
def act_and_mul_fp8_kernel(
    gate_ptr, up_ptr, s_ptr, out_ptr, K, sg, su, ACT: tl.constexpr, CHUNK: tl.constexpr
):
    """Program (row, chunk): ``e4m3(activation(gate) * up * (1/scale))`` for ``CHUNK``
    columns of one row into ``out_ptr`` (contiguous ``[M, K]``)."""
    row = tl.program_id(0)
    cols = tl.program_id(1) * CHUNK + tl.arange(0, CHUNK)
    mask = cols < K
    p = act_and_mul_chunk(gate_ptr, up_ptr, row, cols, mask, sg, su, ACT)
    inv = tl.math.div_rn(1.0, tl.load(s_ptr).to(tl.float32))
    tl.store(out_ptr + row.to(tl.int64) * K + cols, e4m3(p * inv), mask=mask)


@triton.jit
def act_and_mul_nvfp4_kernel(
    gate_ptr, up_ptr, g_ptr, packed_ptr, scale_ptr, M, K, KB_PAD, sg, su,
    ACT: tl.constexpr, SWIZZLE: tl.constexpr, CHUNK: tl.constexpr,
):  # fmt: skip
    """Program (row, chunk): NVFP4 of ``activation(gate) * up`` for ``CHUNK // 16`` blocks of
    one row (with ``SWIZZLE`` the grid also covers the padding rows and block columns, which
    get zero scales)."""
    row = tl.program_id(0)
    cols = tl.program_id(1) * CHUNK + tl.arange(0, CHUNK)
    p = act_and_mul_chunk(gate_ptr, up_ptr, row, cols, (cols < K) & (row < M), sg, su, ACT)
    g = tl.load(g_ptr).to(tl.float32)
    kb0 = tl.program_id(1) * (CHUNK // 16)
    store_nvfp4(p, row, kb0, M, K, KB_PAD, g, packed_ptr, scale_ptr, SWIZZLE, CHUNK // 16)
