"""The norm / activation + quant kernels (launched by ``launch.py``); format helpers from
``formats.py``.

The arithmetic is ``graphfuse/ops/norm_act_ref.py``'s, operation for operation (every
division ``div_rn``, the square root ``sqrt_rn``, no fused multiply-add but where written:
the launchers compile with ``enable_fp_fusion=False``), with the freedoms docs/numerics.md's
GPU acceptance allows: the sum of squares is a tree reduction over the row (in the NVFP4
kernels its leaves fuse a word's two squares into one multiply-add), the activations'
``exp`` and division are the hardware's ``ex2.approx`` and ``rcp.approx`` (within 2 and 1
ulp; the reference's exp polynomial and ``div_rn`` made the SiLU kernels compute-bound),
and the NVFP4 encode multiplier is the attention epilogues' (``formats.nvfp4_block_scale``).

The RMSNorm kernels and the NVFP4 act_and_mul kernel take the row length ``K`` as a
compile-time constant (a compile a hidden size): address arithmetic folds, a power-of-two
``K``'s mean is a multiply, and where the tile covers the row exactly no load or store is
masked by column.

The NVFP4 kernels read their inputs two elements per word (``pairs.split_pairs``: int32 words
of 16-bit floats, int64 words of fp32), so an NVFP4 block's 16 values are 8 words of a
``[blocks, 8]`` tile and each packed byte is the two halves of one word: the block amax is a
reduction along the tile's last axis and no reshape moves values between threads.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from ..formats import e4m3, zero_sf_pad
from .pairs import (
    block_words,
    join_pairs,
    packed_products,
    packed_sums,
    split_pairs,
    split_pairs_f32,
    store_nvfp4_pairs,
)

# gelu_tanh (norm_act_ref.GELU_BETA2, GELU_KAPPA)
_GELU_BETA2 = tl.constexpr(1.5957691216057308)
_GELU_KAPPA = tl.constexpr(0.044715)

_NEG_LOG2E = tl.constexpr(-1.4426950408889634)

SILU = tl.constexpr(0)
GELU_TANH = tl.constexpr(1)


@triton.jit
def _ex2(x):
    """``2**x`` by the hardware's ``ex2.approx.ftz`` (one MUFU instruction, about 2 ulp;
    denormal inputs and results are zeros)."""
    return tl.inline_asm_elementwise(
        "ex2.approx.ftz.f32 $0, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True, pack=1
    )


@triton.jit
def _rcp(x):
    """``1 / x`` by the hardware's ``rcp.approx.ftz`` (one MUFU instruction, about 1 ulp;
    ``1 / x`` below the normal range is zero)."""
    return tl.inline_asm_elementwise(
        "rcp.approx.ftz.f32 $0, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True, pack=1
    )


@triton.jit
def dependent_start(PDL: tl.constexpr):
    """A kernel's first step. With ``PDL`` (launched as a programmatic dependent launch, sm_90
    and later) the program waits until the kernel before it has finished and its writes are
    visible, then lets the next kernel's programs be placed: back to back, the next call's
    programs are resident when this call ends instead of launched after it."""
    if PDL:
        gdc_wait()
        gdc_launch_dependents()


@triton.jit
def activation(v, ACT: tl.constexpr):
    """``silu`` (``ACT == SILU``) or ``gelu_tanh`` of fp32 ``v``, in fp32: the reference's
    ``v / (1 + exp(-k))`` with ``k = v`` or ``sqrt(8/pi) * (v + 0.044715 v^3)``, the exp and
    the reciprocal by the hardware (``_ex2``, ``_rcp``: no denormal or division slow paths).

    Computed as ``(v / 4) * (1 / (exp(-k) / 4 + 1 / 4))``: exact scalings by 4 keep the
    reciprocal's argument below ``2**126`` wherever the reference's ``1 + exp(-k)`` is finite,
    so its result stays normal (``rcp.approx.ftz`` flushes results below ``2**-126``), and
    where ``exp(-k)`` overflows in the reference (``-k > 88.72``) the argument is at least
    ``2**126`` and the result flushes to zero: ``v * 0`` as the reference's ``v / inf``."""
    if ACT == GELU_TANH:
        k = (v + ((v * v) * v) * _GELU_KAPPA) * _GELU_BETA2
    else:
        k = v
    quarter_exp = _ex2(tl.fma(k, _NEG_LOG2E, -2.0))  # exp(-k) / 4
    return (v * 0.25) * _rcp(quarter_exp + 0.25)


@triton.jit
def normed(v, r, w, NORM_DT: tl.constexpr, OUT_DT: tl.constexpr, WEIGHT_FIRST: tl.constexpr):
    """The normalised values of fp32 ``v`` (``r = 1 / rms``) times the weight ``w``, in fp32:
    ``WEIGHT_FIRST``: ``(v * r * w)`` rounded to ``NORM_DT``; otherwise ``v * r`` rounded to
    ``NORM_DT`` first, the product with ``w`` to ``OUT_DT``."""
    n = v * r
    if WEIGHT_FIRST:
        z = (n * w).to(NORM_DT).to(tl.float32)
    else:
        z = (w * n.to(NORM_DT).to(tl.float32)).to(OUT_DT).to(tl.float32)
    return z


@triton.jit
def normed_pairs(
    ve, vo, r, ww, W_DT: tl.constexpr, NORM_DT: tl.constexpr, OUT_DT: tl.constexpr,
    WEIGHT_FIRST: tl.constexpr,
):  # fmt: skip
    """``normed`` of the even / odd values ``ve`` / ``vo`` with the weight words ``ww``
    (``split_pairs`` words of ``W_DT``). Where the norm, the weight and the product are one
    16-bit dtype and the norm is rounded before the weight multiply (the transformers
    spelling of a bf16 or fp16 model), a word's two products are one packed multiply
    (``packed_products``) whose halves are the fp32 values (``split_pairs_f32``): the
    compiler's own packing paired values of different words, which cost two more
    instructions a value to re-pack the weights and unpack the products."""
    if NORM_DT == W_DT and OUT_DT == W_DT and W_DT.primitive_bitwidth == 16 and not WEIGHT_FIRST:
        ze, zo = split_pairs_f32(packed_products(ve * r, vo * r, ww, W_DT), W_DT)
    else:
        we, wo = split_pairs(ww, W_DT)
        ze = normed(ve, r, we, NORM_DT, OUT_DT, WEIGHT_FIRST)
        zo = normed(vo, r, wo, NORM_DT, OUT_DT, WEIGHT_FIRST)
    return ze, zo


@triton.jit
def inv_rms(sum_sq, K: tl.constexpr, eps):
    """``1 / sqrt(sum_sq / K + eps)``, both divisions and the root correctly rounded (the
    division by a power-of-two ``K`` a multiply by ``1 / K``: the same exact quotient, rounded
    once)."""
    if K & (K - 1) == 0:
        mean = sum_sq * (1.0 / K)
    else:
        mean = tl.math.div_rn(sum_sq, tl.cast(K, tl.float32))
    return tl.math.div_rn(1.0, tl.math.sqrt_rn(mean + eps))


@triton.jit
def rms_norm_fp8_kernel(
    x_ptr, res_ptr, res_out_ptr, w_ptr, s_ptr, out_ptr, K: tl.constexpr, sx, sr, eps,
    HAS_RES: tl.constexpr, NORM_DT: tl.constexpr, OUT_DT: tl.constexpr,
    WEIGHT_FIRST: tl.constexpr, EARLY: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    """One program per row (``norm_act_ref.rms_norm_ref``; the row in ``BLOCK`` lanes):
    RMSNorm, then ``e4m3(z * (1/scale))`` into ``out_ptr`` (contiguous ``[M, K]``). With
    ``HAS_RES`` the row is ``h = x + residual`` rounded to x's dtype, also stored to
    ``res_out_ptr`` (contiguous ``[M, K]``). ``EARLY``: the weight and the scale are loaded
    with the row, before the reduction (their latency hidden where a row's latency is the
    kernel's), else after it."""
    dependent_start(PDL)
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    row64 = row.to(tl.int64)
    mask = cols < K
    x = tl.load(x_ptr + row64 * sx + cols, mask=mask, other=0.0)
    if EARLY:
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        scale = tl.load(s_ptr).to(tl.float32)
    v = x.to(tl.float32)
    if HAS_RES:
        res = tl.load(res_ptr + row64 * sr + cols, mask=mask, other=0.0).to(tl.float32)
        h = (v + res).to(x_ptr.dtype.element_ty)
        tl.store(res_out_ptr + row64 * K + cols, h, mask=mask)
        v = h.to(tl.float32)
    r = inv_rms(tl.sum(v * v, axis=0), K, eps)
    if not EARLY:
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        scale = tl.load(s_ptr).to(tl.float32)
    z = normed(v, r, w, NORM_DT, OUT_DT, WEIGHT_FIRST)
    inv = tl.math.div_rn(1.0, scale)
    tl.store(out_ptr + row64 * K + cols, e4m3(z * inv), mask=mask)


@triton.jit
def _row_words(x_ptr, res_ptr, row, sx, sr, words, live, other, HAS_RES: tl.constexpr):
    """Row ``row``'s x words and residual words (x's again without a residual), loaded where
    ``live`` (None: everywhere) with ``other`` elsewhere."""
    row64 = row.to(tl.int64)
    xw = tl.load(x_ptr + row64 * sx + words, mask=live, other=other)
    if HAS_RES:
        rw = tl.load(res_ptr + row64 * sr + words, mask=live, other=other)
    else:
        rw = xw
    return xw, rw


@triton.jit
def _row_values(xw, rw, DT: tl.constexpr, HAS_RES: tl.constexpr):
    """The normalised row's input words and their even / odd values in fp32: the x words
    ``xw``, or with ``HAS_RES`` the words of ``x + residual`` (``rw``) rounded to ``DT``."""
    if HAS_RES:
        if DT.primitive_bitwidth == 16:
            hw = packed_sums(xw, rw, DT)
            ve, vo = split_pairs_f32(hw, DT)
        else:
            xe, xo = split_pairs(xw, DT)
            re, ro = split_pairs(rw, DT)
            ve, vo = xe + re, xo + ro
            hw = join_pairs(ve, vo, DT)
    else:
        hw = xw
        ve, vo = split_pairs_f32(xw, DT)
    return hw, ve, vo


@triton.jit
def _row_inv_rms(ve, vo, K: tl.constexpr, eps):
    """``inv_rms`` of a row's even / odd values (``[NB, 8]``; zeros past the row)."""
    return inv_rms(tl.sum(tl.sum(tl.fma(ve, ve, vo * vo), axis=1), axis=0), K, eps)


@triton.jit
def _store_residual(hw, res_out_ptr, row, words, mask, K: tl.constexpr, HAS_RES: tl.constexpr):
    """With ``HAS_RES``, stores the new residual words ``hw`` (words ``words`` of row ``row``,
    real where ``mask``) into ``res_out_ptr`` (contiguous ``[M, K / 2]`` words)."""
    if HAS_RES:
        tl.store(res_out_ptr + row.to(tl.int64) * (K // 2) + words, hw, mask=mask)


@triton.jit
def _rms_norm_nvfp4_row(
    xw, rw, ww, w_ptr, g, res_out_ptr, packed_ptr, scale_ptr, row, kb, words, mask,
    K: tl.constexpr, KB_PAD: tl.constexpr, eps, DT: tl.constexpr, W_DT: tl.constexpr,
    HAS_RES: tl.constexpr, NORM_DT: tl.constexpr, OUT_DT: tl.constexpr,
    WEIGHT_FIRST: tl.constexpr, SWIZZLE: tl.constexpr, EARLY: tl.constexpr, FULL: tl.constexpr,
):  # fmt: skip
    """``rms_norm_nvfp4_kernel``'s work on row ``row`` (x words ``xw``, residual words ``rw``,
    global scale ``g``): with ``EARLY`` the weight words are ``ww``, else they are read here,
    after the reduction. ``mask`` is the real words (None where ``FULL``: all of them)."""
    hw, ve, vo = _row_values(xw, rw, DT, HAS_RES)
    _store_residual(hw, res_out_ptr, row, words, mask, K, HAS_RES)
    r = _row_inv_rms(ve, vo, K, eps)
    if not EARLY:
        ww = tl.load(w_ptr + words, mask=mask, other=None if FULL else 0)
    ze, zo = normed_pairs(ve, vo, r, ww, W_DT, NORM_DT, OUT_DT, WEIGHT_FIRST)
    store_nvfp4_pairs(ze, zo, row, kb, K, KB_PAD, g, packed_ptr, scale_ptr, SWIZZLE, FULL)


@triton.jit
def rms_norm_nvfp4_kernel(
    x_ptr, res_ptr, res_out_ptr, w_ptr, g_ptr, packed_ptr, scale_ptr, M, K: tl.constexpr,
    KB_PAD: tl.constexpr, sx, sr, eps, ROW_PROGRAMS, DT: tl.constexpr, W_DT: tl.constexpr,
    HAS_RES: tl.constexpr, NORM_DT: tl.constexpr, OUT_DT: tl.constexpr,
    WEIGHT_FIRST: tl.constexpr, SWIZZLE: tl.constexpr, EARLY: tl.constexpr, LOOP: tl.constexpr,
    NB: tl.constexpr, PARTS: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    """The rows as ``[NB, 8]`` words (x, residual and weight through ``split_pairs``; strides
    in words), RMSNorm as ``rms_norm_fp8_kernel`` computes it, then NVFP4 of the row. Where
    ``NB`` blocks are the row's (``K = 16 NB``) no load or store is masked by column.

    Program ``p < ROW_PROGRAMS`` takes rows ``p, p + ROW_PROGRAMS, ...`` below ``M``: one row
    without ``LOOP`` (``ROW_PROGRAMS = M``; ``EARLY`` as in ``rms_norm_fp8_kernel``); with
    ``LOOP`` it reads the weight and the global scale once and issues each row's loads before
    it computes the previous row, so its next row's bytes are in flight while it computes.
    With ``PARTS > 1`` (few rows, no ``LOOP``) each row has ``PARTS`` programs: each reads the
    whole row for the sum of squares and normalises and quantises its ``NB / PARTS`` block
    columns, so a row's encode, most of its instructions, is spread over several SMs.
    With ``SWIZZLE`` the programs from ``ROW_PROGRAMS * PARTS`` on (the launcher adds them
    where M is not a multiple of 128) zero the layout's padding rows, in parallel with the
    rows."""
    dependent_start(PDL)
    pid = tl.program_id(0)
    if pid >= ROW_PROGRAMS * PARTS:
        if SWIZZLE:
            zero_sf_pad(
                scale_ptr, M, KB_PAD, pid - ROW_PROGRAMS * PARTS,
                tl.num_programs(0) - ROW_PROGRAMS * PARTS, NB * 8,
            )  # fmt: skip
    else:
        FULL: tl.constexpr = K == NB * 16
        other = None if FULL else 0
        kb = tl.arange(0, NB)
        words = block_words(kb)
        mask = None if FULL else kb[:, None] < K // 16
        if PARTS > 1:
            row = pid // PARTS
            NP: tl.constexpr = NB // PARTS
            kbp = (pid % PARTS) * NP + tl.arange(0, NP)
            wp = block_words(kbp)
            maskp = None if FULL else kbp[:, None] < K // 16
            xw, rw = _row_words(x_ptr, res_ptr, row, sx, sr, words, mask, other, HAS_RES)
            xp, rp = _row_words(x_ptr, res_ptr, row, sx, sr, wp, maskp, other, HAS_RES)
            ww = tl.load(w_ptr + wp, mask=maskp, other=other)
            g = tl.load(g_ptr).to(tl.float32)
            hp, pe, po = _row_values(xp, rp, DT, HAS_RES)
            _store_residual(hp, res_out_ptr, row, wp, maskp, K, HAS_RES)
            _, ve, vo = _row_values(xw, rw, DT, HAS_RES)
            r = _row_inv_rms(ve, vo, K, eps)
            ze, zo = normed_pairs(pe, po, r, ww, W_DT, NORM_DT, OUT_DT, WEIGHT_FIRST)
            store_nvfp4_pairs(ze, zo, row, kbp, K, KB_PAD, g, packed_ptr, scale_ptr, SWIZZLE, FULL)
        else:
            xw, rw = _row_words(x_ptr, res_ptr, pid, sx, sr, words, mask, other, HAS_RES)
            if EARLY or LOOP:
                ww = tl.load(w_ptr + words, mask=mask, other=other)
            else:
                ww = xw  # read after the reduction (``_rms_norm_nvfp4_row``)
            g = tl.load(g_ptr).to(tl.float32)
            if LOOP:
                for i in tl.range(0, tl.cdiv(M - pid, ROW_PROGRAMS), num_stages=1):
                    row = pid + i * ROW_PROGRAMS
                    # past the last row, row M - 1 again (an L2 hit; no predicated loads)
                    nxt = tl.minimum(row + ROW_PROGRAMS, M - 1)
                    xn, rn = _row_words(
                        x_ptr, res_ptr, nxt, sx, sr, words, mask, other, HAS_RES
                    )  # fmt: skip
                    _rms_norm_nvfp4_row(
                        xw, rw, ww, w_ptr, g, res_out_ptr, packed_ptr, scale_ptr, row, kb,
                        words, mask, K, KB_PAD, eps, DT, W_DT, HAS_RES, NORM_DT, OUT_DT,
                        WEIGHT_FIRST, SWIZZLE, True, FULL,
                    )  # fmt: skip
                    xw, rw = xn, rn
            else:
                _rms_norm_nvfp4_row(
                    xw, rw, ww, w_ptr, g, res_out_ptr, packed_ptr, scale_ptr, pid, kb, words,
                    mask, K, KB_PAD, eps, DT, W_DT, HAS_RES, NORM_DT, OUT_DT, WEIGHT_FIRST,
                    SWIZZLE, EARLY, FULL,
                )  # fmt: skip


@triton.jit
def act_and_mul(g, u, DT: tl.constexpr, ACT: tl.constexpr):
    """``activation(gate) * up`` of fp32 ``g`` / ``u`` in ``DT`` (``norm_act_ref.act_and_mul_ref``):
    the activation in fp32 rounded to DT, the product rounded to DT; returned in fp32."""
    a = activation(g, ACT).to(DT).to(tl.float32)
    return (a * u).to(DT).to(tl.float32)


@triton.jit
def act_and_mul_pairs(ge, go, uw, DT: tl.constexpr, ACT: tl.constexpr):
    """``act_and_mul`` of the even / odd gate values ``ge`` / ``go`` (fp32) and the up words
    ``uw`` (``split_pairs`` words of ``DT``); for 16-bit ``DT`` a word's two products are one
    packed multiply (``packed_products``, as ``normed_pairs``)."""
    if DT.primitive_bitwidth == 16:
        p = packed_products(activation(ge, ACT), activation(go, ACT), uw, DT)
        pe, po = split_pairs_f32(p, DT)
    else:
        ue, uo = split_pairs(uw, DT)
        pe = act_and_mul(ge, ue, DT, ACT)
        po = act_and_mul(go, uo, DT, ACT)
    return pe, po


@triton.jit
def act_and_mul_fp8_kernel(
    gate_ptr, up_ptr, s_ptr, out_ptr, K, sg, su, ACT: tl.constexpr, CHUNK: tl.constexpr,
    CHUNKS: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    """Program ``pid``: ``e4m3(activation(gate) * up * (1/scale))`` for ``CHUNK`` columns (chunk
    ``pid % CHUNKS``) of row ``pid // CHUNKS`` into ``out_ptr`` (contiguous ``[M, K]``). A
    row's chunks are consecutive programs, which the hardware starts together, so the memory
    read at once is a few contiguous rows rather than one chunk of many rows."""
    dependent_start(PDL)
    pid = tl.program_id(0)
    row64 = (pid // CHUNKS).to(tl.int64)
    cols = (pid % CHUNKS) * CHUNK + tl.arange(0, CHUNK)
    mask = cols < K
    gv = tl.load(gate_ptr + row64 * sg + cols, mask=mask, other=0.0).to(tl.float32)
    uv = tl.load(up_ptr + row64 * su + cols, mask=mask, other=0.0).to(tl.float32)
    p = act_and_mul(gv, uv, gate_ptr.dtype.element_ty, ACT)
    inv = tl.math.div_rn(1.0, tl.load(s_ptr).to(tl.float32))
    tl.store(out_ptr + row64 * K + cols, e4m3(p * inv), mask=mask)


@triton.jit
def act_and_mul_nvfp4_kernel(
    gate_ptr, up_ptr, g_ptr, packed_ptr, scale_ptr, M, K: tl.constexpr, KB_PAD: tl.constexpr,
    sg, su, DT: tl.constexpr, ACT: tl.constexpr, SWIZZLE: tl.constexpr, NB: tl.constexpr,
    PDL: tl.constexpr,
):  # fmt: skip
    """Program (row < M, block chunk): NVFP4 of ``activation(gate) * up`` for ``NB`` blocks of
    one row, read as ``[NB, 8]`` words (strides in words); no masks where the chunks tile the
    row's blocks exactly. With ``SWIZZLE`` the chunks also cover the padding block columns
    (zero scales), and the programs of rows from ``M`` on (the launcher adds them where M is
    not a multiple of 128) zero the layout's padding rows."""
    dependent_start(PDL)
    row = tl.program_id(0)
    if row >= M:
        if SWIZZLE:
            pid = (row - M) * tl.num_programs(1) + tl.program_id(1)
            nprog = (tl.num_programs(0) - M) * tl.num_programs(1)
            zero_sf_pad(scale_ptr, M, KB_PAD, pid, nprog, NB * 8)
    else:
        FULL: tl.constexpr = (KB_PAD == K // 16) & ((K // 16) % NB == 0)
        kb = tl.program_id(1) * NB + tl.arange(0, NB)
        words = block_words(kb)
        mask = None if FULL else kb[:, None] < K // 16
        other = None if FULL else 0
        row64 = row.to(tl.int64)
        gw = tl.load(gate_ptr + row64 * sg + words, mask=mask, other=other)
        uw = tl.load(up_ptr + row64 * su + words, mask=mask, other=other)
        ge, go = split_pairs_f32(gw, DT)
        pe, po = act_and_mul_pairs(ge, go, uw, DT, ACT)
        g = tl.load(g_ptr).to(tl.float32)
        store_nvfp4_pairs(pe, po, row, kb, K, KB_PAD, g, packed_ptr, scale_ptr, SWIZZLE, FULL)
