"""Warp-specialised fused attention for prefill on Hopper (sm_90), written in Gluon: 16-bit
q / k / v, and FP8 q / k / v (FP8 ``Q K^T``; 16-bit P·V in the default precision, FP8 P·V
in fast mode).

The plain Triton kernel (``triton_kernel.py``) ends every key tile in CTA-wide barriers, so its two
warpgroups run their softmax at the same time while the tensor cores wait; on the H200 it
stays at 0.80-0.84x cuDNN's SDPA for bf16, and a minimal Triton kernel does no better
(measured 2026-12-03, docs/gpu.md). Here the roles are split as FlashAttention-3 does:

- a producer warp loads each row block's Q and its K / V tiles with TMA, K / V into a
  ring of ``NSTAGE`` buffers (``config.ws_stages``: 3 in fast mode at D = 128, else 2;
  mbarriers: "ready" with the byte count; K and V each have an "empty" barrier released by
  both consumers, so a K slot refills once its ``Q K^T`` is done, before the ``P V`` of the same
  tile; Q has one too, released after the block's last ``Q K^T``);
- two consumer warpgroups, each owning 64 of the CTA's 128 query rows, run ``S = Q K^T``
  (wgmma from shared memory; FP8 operands on the FP8 tensor cores, both K-major), the online
  softmax (exp2 with the softmax and dequant scales folded in; 16-bit P, or in fast mode
  ``256 * P`` in e4m3 as the Triton kernel rounds it; with FP8 q / k and an FP8 / NVFP4
  output in the default precision a lazy running max, ``_softmax_step``) and ``O += P V`` (P from
  registers) with no barrier between them, so one's softmax runs under
  the other's GEMMs; the second starts after the first's first ``Q K^T`` (an offset that
  the tensor cores' arbitration then keeps);
- within a consumer, FlashAttention-3's order: tile j's ``Q K^T`` and tile j-1's ``P V`` are
  issued back to back, tile j's softmax runs once ``Q K^T`` is done while ``P V`` is still on
  the tensor cores (the last tile's ``P V`` is peeled). The softmax sits in a branch of its
  own (taken unless the scale is NaN, whose output is NaN through tile 0 anyway): in one
  basic block ptxas moves the second ``wgmma.wait_group`` above the softmax, which then no
  longer overlaps (checked in the sm_90 SASS: 16 HGMMA, ``DEPBAR 1``, the exponentials,
  ``DEPBAR 0``);
- each consumer writes its rows in the output format: a 16-bit or fp32 type, FP8
  (``acc * (s_v/l) * (1/s_o)``, hardware rne + satfinite) or NVFP4 (packed codes and
  swizzled scale bytes), with the arithmetic of ``store_attention_acc``.
  In the default precision an FP8 V is upcast to fp16 once per call by the launcher
  (``quant.launch.fp8_upcast``, exact). In fast mode the FP8 wgmma wants V K-major: the
  launcher copies it once per call to ``[B, H, D, S]`` tiles (``launch.fast_v_tiles``) whose
  keys are ordered so that each thread's accumulator values of P are already its share of
  the FP8 A operand (``_p_operand``): no shuffles, one conversion instruction per two values.

The kernel is persistent: one program per SM (fewer when there are fewer row blocks) takes
the 128-row blocks of every (batch, head) in turn, heaviest first and dealt in a snake order
(``_item``), so the producer loads the next block's Q and first K / V tiles while the
consumers finish the last block's ``P V`` and write it; the ring's slots and phases run on
across blocks. On an H100 this ran the causal B=4 S=4096 rows 4-7% faster than one program
per row block (docs/gpu.md, "Prefill: the persistent schedule").

Which calls it serves is the rule in ``prefill/__init__.py`` (``config.ws_eligible`` on an
sm_90 device with Gluon); ``launch.gluon_attention_into`` launches it. The tile shape
(128 x 128) is fixed.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from ..formats import e4m3
from .gluon_nvfp4 import store_nvfp4

CONSUMER_REGS = gl.constexpr(240)  # per thread, each consumer warpgroup (the producer warp gets 24)
MAXNREG = 168  # 3 warpgroups: 2 x 240 + 24 (rounded) <= 3 x 168
LAZY_MAX_LOG2 = gl.constexpr(8.0)  # growth of a row's max (log2) a lazy running max ignores


@gluon.jit
def _producer(
    q_desc, k_desc, v_desc, q_bufs, k_bufs, v_bufs, q_bar, q_empty, k_ready, v_ready, k_empty,
    v_empty, n_items, pid, nprog, BH, H, G, SKV, n_m, causal, causal_off, q_rb, q_rh, q_ch,
    k_rb, k_rh, k_ch, v_rb, v_rh, v_ch,
):  # fmt: skip
    # constexprs come from the buffers' types: scalars passed through warp_specialize arrive
    # as run-time values
    NSTAGE: gl.constexpr = k_bufs.type.shape[0]
    BN: gl.constexpr = k_bufs.type.shape[1]
    FAST: gl.constexpr = v_bufs.dtype.primitive_bitwidth == 8  # V^T tiles [HD, BN]
    t = 0  # key tiles loaded so far: the ring's slot and phase run on across work items
    for it in range(n_items):
        b, h, hk, q_start, n_tiles = _item(
            it, pid, nprog, BH, H, G, SKV, n_m, causal, causal_off, BN
        )
        q_row = b * q_rb + h * q_rh + q_start
        k_row = b * k_rb + hk * k_rh
        v_row = b * v_rb + hk * v_rh
        mbarrier.wait(q_empty, (it & 1) ^ 1)  # both consumers' last Q K^T of the item before
        mbarrier.expect(q_bar, 2 * q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [q_row, h * q_ch], q_bar, q_bufs.index(0))
        tma.async_copy_global_to_shared(q_desc, [q_row + 64, h * q_ch], q_bar, q_bufs.index(1))
        for j in range(n_tiles):
            s = t % NSTAGE
            ph = (t // NSTAGE) & 1
            mbarrier.wait(k_empty.index(s), ph ^ 1)  # both consumers' Q K^T of tile t - NSTAGE
            mbarrier.expect(k_ready.index(s), k_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(
                k_desc, [k_row + j * BN, hk * k_ch], k_ready.index(s), k_bufs.index(s)
            )
            mbarrier.wait(v_empty.index(s), ph ^ 1)  # both consumers' P V of tile t - NSTAGE
            mbarrier.expect(v_ready.index(s), v_desc.block_type.nbytes)
            if FAST:
                v_at = [v_row, hk * v_ch + j * BN]
            else:
                v_at = [v_row + j * BN, hk * v_ch]
            tma.async_copy_global_to_shared(v_desc, v_at, v_ready.index(s), v_bufs.index(s))
            t += 1


@gluon.jit
def _dealt(it, pid, nprog):
    """The item program ``pid`` gets in round ``it`` of the snake deal: ``it * nprog + pid``
    when ``it`` is even, ``it * nprog + nprog - 1 - pid`` when odd, which balances the causal
    lengths of items ordered heaviest first."""
    return it * nprog + gl.where(it % 2 == 0, pid, nprog - 1 - pid)


@gluon.jit
def _item(it, pid, nprog, BH, H, G, SKV, n_m, causal, causal_off, BN: gl.constexpr):
    """This program's ``it``-th work item, a 128-row block of one (batch, head): (b, h, KV
    head, first query row, key tiles). Items are ordered heaviest first (every (batch, head)'s
    last row block, then the one before) and dealt by ``_dealt``."""
    i = _dealt(it, pid, nprog)
    bh = i % BH
    b = bh // H
    h = bh % H
    q_start = (n_m - 1 - i // BH) * 128
    if causal != 0:
        n_tiles = gl.minimum(gl.maximum(q_start + 128 + causal_off, 0) + BN - 1, SKV) // BN
    else:
        n_tiles = SKV // BN
    return b, h, h // G, q_start, n_tiles


@gluon.jit
def _consume(
    c: gl.constexpr, out_ptr, osc_ptr, q_bufs, k_bufs, v_bufs, q_bar, q_empty, k_ready, v_ready,
    k_empty, v_empty, go_bar, n_items, pid, nprog, BH, H, G, SKV, n_m, sob, soh, sos, qk_scale,
    causal, causal_off, qs_ptr, ks_ptr, vs_ptr, scale_bits, sf_ptr, nmb, nmh, nms, nch, nv_k,
    nv_kbpad,
):  # fmt: skip
    """Consumer ``c``: query rows ``64c ..`` of each work item's 128-row block."""
    NSTAGE: gl.constexpr = k_bufs.type.shape[0]
    BN: gl.constexpr = k_bufs.type.shape[1]
    HD: gl.constexpr = k_bufs.type.shape[2]
    V_BITS: gl.constexpr = v_bufs.dtype.primitive_bitwidth  # 8: fast mode (FP8 P, V^T tiles)
    # wgmma K per instruction: 16 (16-bit operands), 32 (FP8)
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1],
        instr_shape=[16, BN, 256 // q_bufs.dtype.primitive_bitwidth],
    )  # fmt: skip
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HD, 256 // V_BITS]
    )
    p_layout: gl.constexpr = gl.DotOperandLayout(
        operand_index=0, parent=o_layout, k_width=32 // V_BITS
    )
    # fast mode's P is 256 * P (e4m3 keeps small probabilities normal), as in triton_kernel.py
    P_LOG2: gl.constexpr = 8.0 if V_BITS == 8 else 0.0
    # FP8 q / k with 16-bit P and an FP8 / NVFP4 output: the lazy running max (``_softmax_step``)
    # and the rescale skipped by warps whose rows' max stayed (``_rescaled``)
    QUANT_OUT: gl.constexpr = (out_ptr.dtype.element_ty == gl.float8e4nv) or (
        out_ptr.dtype.element_ty == gl.uint8
    )
    LAZY: gl.constexpr = V_BITS == 16 and q_bufs.dtype.primitive_bitwidth == 8 and QUANT_OUT
    row_l: gl.constexpr = gl.SliceLayout(1, s_layout)
    orow_l: gl.constexpr = gl.SliceLayout(1, o_layout)

    # dequant scales, read on the device and folded in as the Triton kernel does
    if scale_bits & 1:
        qk_scale = qk_scale * gl.load(qs_ptr).to(gl.float32)
    if scale_bits & 2:
        qk_scale = qk_scale * gl.load(ks_ptr).to(gl.float32)
    o_scale = gl.full([], 1.0, gl.float32)
    if scale_bits & 4:
        o_scale = gl.load(vs_ptr).to(gl.float32)
    cols = gl.arange(0, BN, layout=gl.SliceLayout(0, s_layout))
    zero_s = gl.zeros([64, BN], gl.float32, layout=s_layout)
    if c == 1:
        mbarrier.wait(go_bar, 0)
    t = 0  # key tiles consumed so far (the producer's count)
    for it in range(n_items):
        _, _, _, q_start, n_tiles = _item(
            it, pid, nprog, BH, H, G, SKV, n_m, causal, causal_off, BN
        )
        first_row = q_start + c * 64
        rows = first_row + gl.arange(0, 64, layout=row_l)
        m_i = gl.full([64], float("-inf"), gl.float32, layout=row_l)
        l_i = gl.full([64], 0.0, gl.float32, layout=row_l)
        acc = gl.zeros([64, HD], gl.float32, layout=o_layout)
        mbarrier.wait(q_bar, it & 1)
        if n_tiles > 0:
            # FlashAttention-3's order: tile j's Q K^T and tile j-1's P V are issued back to
            # back, tile j's softmax runs while P V is on the tensor cores; P (``_p_carried``)
            # is the value the loop carries, S lives inside one step
            s = t % NSTAGE
            mbarrier.wait(k_ready.index(s), (t // NSTAGE) & 1)
            qk = warpgroup_mma(
                q_bufs.index(c), k_bufs.index(s).permute((1, 0)), zero_s, use_acc=False,
                is_async=True,
            )  # fmt: skip
            qk = warpgroup_mma_wait(0, deps=(qk,))
            mbarrier.arrive(k_empty.index(s), count=1)
            if c == 0:
                if it == 0:
                    mbarrier.arrive(go_bar, count=1)
            p, alpha, m_i, l_i = _softmax_step(
                qk, 0, m_i, l_i, qk_scale, rows, cols, first_row, causal, causal_off, BN, P_LOG2,
                LAZY,
            )  # fmt: skip
            p_c = _p_carried(p, v_bufs.dtype, p_layout)
            for j in range(1, n_tiles):
                s = (t + j) % NSTAGE
                sp = (t + j - 1) % NSTAGE
                mbarrier.wait(k_ready.index(s), ((t + j) // NSTAGE) & 1)
                qk = warpgroup_mma(
                    q_bufs.index(c), k_bufs.index(s).permute((1, 0)), zero_s, use_acc=False,
                    is_async=True,
                )  # fmt: skip
                acc = _rescaled(acc, gl.convert_layout(alpha, orow_l), V_BITS == 8, LAZY)
                mbarrier.wait(v_ready.index(sp), ((t + j - 1) // NSTAGE) & 1)
                acc = _pv_mma(p_c, v_bufs, sp, acc, p_layout)
                qk = warpgroup_mma_wait(1, deps=(qk,))
                mbarrier.arrive(k_empty.index(s), count=1)
                if qk_scale == qk_scale:  # a block of its own (module docstring)
                    p, alpha, m_i, l_i = _softmax_step(
                        qk, j, m_i, l_i, qk_scale, rows, cols, first_row, causal, causal_off,
                        BN, P_LOG2, LAZY,
                    )  # fmt: skip
                acc = _wait_pv(acc, p_c)
                mbarrier.arrive(v_empty.index(sp), count=1)
                p_c = _p_carried(p, v_bufs.dtype, p_layout)
            mbarrier.arrive(q_empty, count=1)  # the producer may load the next item's Q
            t += n_tiles
            s = (t - 1) % NSTAGE
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, orow_l), 1)
            mbarrier.wait(v_ready.index(s), ((t - 1) // NSTAGE) & 1)
            acc = _pv_mma(p_c, v_bufs, s, acc, p_layout)
            acc = warpgroup_mma_wait(0, deps=(acc,))
            mbarrier.arrive(v_empty.index(s), count=1)
        else:  # no key tile at all (bottom-right causal, Sq > Skv)
            mbarrier.arrive(q_empty, count=1)
            if c == 0:
                if it == 0:
                    mbarrier.arrive(go_bar, count=1)
        # (b, h) again rather than kept through the key loop, whose registers are full
        b, h, _, _, _ = _item(it, pid, nprog, BH, H, G, SKV, n_m, causal, causal_off, BN)
        l_o = gl.convert_layout(l_i, orow_l)
        row_scale = gl.where(l_o > 0.0, o_scale / l_o, 0.0)  # fully masked rows give zeros
        if out_ptr.dtype.element_ty == gl.uint8:  # NVFP4: packed codes and swizzled scale bytes
            nv_row = b.to(gl.int64) * nmb + h.to(gl.int64) * nmh + first_row * nms
            store_nvfp4(
                acc, row_scale, out_ptr, osc_ptr, sf_ptr, nv_row, nms, h * nch, nv_k, nv_kbpad
            )
        else:
            out_base = b.to(gl.int64) * sob + h.to(gl.int64) * soh  # (batch, head)'s row 0
            orows = (first_row + gl.arange(0, 64, layout=orow_l)).to(gl.int64)
            ocols = gl.arange(0, HD, layout=gl.SliceLayout(0, o_layout))
            offs = gl.expand_dims(out_base + orows * sos, 1) + gl.expand_dims(ocols, 0)
            if out_ptr.dtype.element_ty == gl.float8e4nv:
                inv = gl.div_rn(gl.full([], 1.0, gl.float32), gl.load(osc_ptr).to(gl.float32))
                o = acc * gl.expand_dims(row_scale * inv, 1)
                gl.store(out_ptr + offs, e4m3(o))
            else:
                o = acc * gl.expand_dims(row_scale, 1)
                gl.store(out_ptr + offs, o.to(out_ptr.dtype.element_ty))


_SKIP_PACK = gl.constexpr(32)  # accumulator values a thread rescales in one asm block


def _skipped_rescale_asm(n: int) -> str:
    """PTX of ``n`` accumulator values times their rows' factors, the multiplies skipped (the
    values passed through) when every factor in the warp is 1. Of each 4 consecutive values a
    thread holds in the wgmma accumulator layout, the first 2 are in row r and the last 2 in
    row r + 8, so operands ``2n`` and ``2n + 2`` are the thread's two row factors."""
    lines = [
        "{ .reg .pred p, q;",
        f"setp.neu.f32 p, ${2 * n}, 0f3F800000;",
        f"setp.neu.f32 q, ${2 * n + 2}, 0f3F800000;",
        "or.pred p, p, q;",
        "vote.sync.any.pred p, p, 0xffffffff;",
    ]
    lines += [f"mov.b32 ${i}, ${n + i};" for i in range(n)]
    lines += ["@!p bra SKIP;"]
    lines += [f"mul.f32 ${i}, ${n + i}, ${2 * n + i};" for i in range(n)]
    lines += ["SKIP:", "}"]
    return "\n".join(lines)


_SKIP_ASM = gl.constexpr(_skipped_rescale_asm(_SKIP_PACK.value))
_SKIP_CONSTRAINTS = gl.constexpr(",".join(["=f"] * _SKIP_PACK.value + ["f"] * 2 * _SKIP_PACK.value))


@gluon.jit
def _rescaled(acc, alpha, FAST: gl.constexpr, LAZY: gl.constexpr):
    """``acc * alpha[:, None]``, computed where it is written: between the issue of tile j's
    ``Q K^T`` and tile j-1's ``P V``, as FlashAttention-3 orders it. As plain multiplies the
    compiler hoists them above the ``Q K^T`` issue (the wgmma is inline assembly with no
    operand in common), which delays the scores the softmax waits for by the 64 multiplies;
    as assembly with side effects they keep their place among the wgmma and barrier
    instructions. ``FAST`` (FP8 P): plain multiplies, placed by the compiler (docs/gpu.md,
    "The accumulator rescale between the two GEMM issues"). ``LAZY`` (the lazy running max of
    ``_softmax_step``, whose factors are mostly exactly 1): a warp skips its multiplies when
    all its rows' factors are 1 (``_skipped_rescale_asm``, a vote and a branch a 32 values)."""
    if FAST:
        return acc * gl.expand_dims(alpha, 1)
    if LAZY:
        return gl.inline_asm_elementwise(
            _SKIP_ASM, _SKIP_CONSTRAINTS, [acc, gl.expand_dims(alpha, 1)], dtype=gl.float32,
            is_pure=False, pack=_SKIP_PACK,
        )  # fmt: skip
    return gl.inline_asm_elementwise(
        "mul.f32 $0, $1, $2;", "=f,f,f", [acc, gl.expand_dims(alpha, 1)], dtype=gl.float32,
        is_pure=False, pack=1,
    )  # fmt: skip


@gluon.jit
def _p_operand(p, dt: gl.constexpr, p_layout: gl.constexpr):
    """P (fp32, wgmma accumulator layout) as the A operand of ``P V`` in ``dt``.

    16-bit: a layout conversion within each thread. FP8 (fast mode): the operand holds 4
    consecutive keys of one row in a register where the accumulator holds 2 keys of 2 rows,
    so the keys are reordered instead of the values moved: key ``8u + 2t + e`` of each 16
    (thread ``t``'s columns) becomes ``4t + 2u + e`` (``config.wgmma_key_order``), and the
    V^T tiles store their keys in that order (``launch.fast_v_tiles``). Each thread
    converts its 8 values of a row pair and 4 keys into two registers of that order
    (``_e4m3_regs``); the reshapes then only relabel what is already the operand layout."""
    if dt.primitive_bitwidth == 8:
        R: gl.constexpr = p.shape[0]
        N: gl.constexpr = p.shape[1]
        q = _e4m3_regs(p)  # row bit 8 and key bit 8 exchanged within each thread's 8 values
        q = gl.reshape(q, [R // 16, 2, 8, N // 16, 2, 4, 2])  # rows (w, h, l), keys (a, u, t, e)
        q = gl.permute(q, [0, 4, 2, 3, 5, 1, 6])  # exchange h and u back, then u after t
        return gl.convert_layout(gl.reshape(q, [R, N]), p_layout)
    else:
        return gl.convert_layout(p.to(dt), p_layout)


@gluon.jit
def _e4m3_regs(p):
    """e4m3 of fp32 ``p`` (accumulator layout: a thread's 8 consecutive values are rows
    ``r, r + 8`` by columns ``c, c + 1, c + 8, c + 9`` in the order (c, r), (c+1, r),
    (c, r+8), (c+1, r+8), then the same at c + 8), packed as rows: the first register holds
    row r's 4 values, the second row r + 8's. The returned tensor's element (i, j) therefore
    holds p's element with the row-8 and column-8 bits of (i, j) exchanged."""
    return gl.inline_asm_elementwise(
        """{ .reg .b16 a, b, c, d;
        cvt.rn.satfinite.e4m3x2.f32 a, $3, $2;
        cvt.rn.satfinite.e4m3x2.f32 b, $7, $6;
        cvt.rn.satfinite.e4m3x2.f32 c, $5, $4;
        cvt.rn.satfinite.e4m3x2.f32 d, $9, $8;
        mov.b32 $0, {a, b};
        mov.b32 $1, {c, d}; }""",
        "=r,=r,f,f,f,f,f,f,f,f", [p], dtype=gl.float8e4nv, is_pure=True, pack=8,
    )  # fmt: skip


@gluon.jit
def _p_carried(p, dt: gl.constexpr, p_layout: gl.constexpr):
    """What the key loop carries from a tile's softmax to its ``P V``: the 16-bit P operand,
    or in fast mode P itself (fp32), converted by ``_pv_mma`` right before its wgmma (an
    8-bit tensor carried through the loop is kept a byte a register, and spills)."""
    if dt.primitive_bitwidth == 8:
        return p
    else:
        return _p_operand(p, dt, p_layout)


@gluon.jit
def _pv_mma(p_c, v_bufs, s, acc, p_layout: gl.constexpr):
    """Issues ``acc += P V`` (asynchronous) with ring slot ``s`` of V and ``_p_carried``'s P."""
    if v_bufs.dtype.primitive_bitwidth == 8:
        a = _p_operand(p_c, v_bufs.dtype, p_layout)
        b = v_bufs.index(s).permute((1, 0))  # the [HD, BN] V^T tile, K-major
    else:
        a = p_c
        b = v_bufs.index(s)
    return warpgroup_mma(a, b, acc, is_async=True)


@gluon.jit
def _wait_pv(acc, p_c):
    """Waits for the last ``P V`` (every wgmma of this warpgroup); returns the accumulator.
    The 16-bit P operand is a dependency of the wait, so its registers stay untouched until
    then. Fast mode's FP8 operand lives only between its conversion and its wgmma (Triton 3.6
    passes no 8-bit registers through the wait); ptxas keeps an in-flight wgmma's operand
    registers."""
    if p_c.dtype.primitive_bitwidth == 32:
        acc = warpgroup_mma_wait(0, deps=(acc,))
    else:
        acc, p_c = warpgroup_mma_wait(0, deps=(acc, p_c))
    return acc


@gluon.jit
def _softmax_step(
    qk, j, m_i, l_i, qk_scale, rows, cols, first_row, causal, causal_off, BN: gl.constexpr,
    P_LOG2: gl.constexpr, LAZY: gl.constexpr,
):  # fmt: skip
    """Online softmax of key tile ``j``'s scores: P times ``2**P_LOG2`` (fp32), the rescale
    factor of the accumulator, the new running max and sum (of the scaled P).

    ``LAZY``: a row's running max moves only when the tile's max exceeds it by more than
    ``LAZY_MAX_LOG2`` (FlashAttention-4's conditional rescale), so P is at most ``2**8`` and
    most tiles leave every factor exactly 1 (docs/numerics.md, "The running max on the GPU")."""
    if causal != 0:
        if (j + 1) * BN - 1 > first_row + causal_off:  # a key past this consumer's 1st row
            keep = gl.expand_dims(rows + causal_off, 1) >= gl.expand_dims(j * BN + cols, 0)
            qk = gl.where(keep, qk, float("-inf"))
    m_tile = gl.max(qk, axis=1) * qk_scale
    if LAZY:
        m_new = gl.where(m_tile > m_i + LAZY_MAX_LOG2, m_tile, m_i)
    else:
        m_new = gl.maximum(m_i, m_tile)
    m_use = gl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet
    alpha = gl.exp2(m_i - m_use)
    p = gl.exp2(qk * qk_scale - gl.expand_dims(m_use - P_LOG2, 1))
    l_i = l_i * alpha + gl.sum(p, axis=1)
    return p, alpha, m_new, l_i


@gluon.jit
def ws_attention_kernel(
    q_desc, k_desc, v_desc, out_ptr, osc_ptr, qs_ptr, ks_ptr, vs_ptr, scale_bits,
    H, G, SQ, SKV, q_rb, q_rh, q_ch, k_rb, k_rh, k_ch, v_rb, v_rh, v_ch, sob, soh, sos,
    qk_scale, causal, causal_off, sf_ptr, nmb, nmh, nms, nch, nv_k, nv_kbpad, n_work,
    NSTAGE: gl.constexpr,
):  # fmt: skip
    """Persistent: a grid of ``min(n_work, SMs)`` programs, each taking the ``n_work =
    B*H*SQ/128`` row blocks dealt to it by ``_item`` (heaviest first), so the next block's Q and
    first key tiles load while the last one's final ``P V`` and stores run. ``scale_bits``:
    which of q / k / v dequant scales (1 / 2 / 4) the pointers hold. A uint8 ``out_ptr`` is
    NVFP4 (``osc_ptr`` its global scale, ``sf_ptr`` the swizzled scale bytes; row
    ``b*nmb + h*nmh + s*nms``, first column ``h*nch`` of the ``[M, nv_k]`` view)."""
    HD: gl.constexpr = q_desc.block_type.shape[1]
    BN: gl.constexpr = k_desc.block_type.shape[0]
    dt: gl.constexpr = q_desc.dtype
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    n_m = SQ // 128
    BH = n_work // n_m
    # rounds of nprog items; the last one (``_dealt``) reaches some programs only
    full = n_work // nprog
    n_items = full + (_dealt(full, pid, nprog) < n_work).to(gl.int32)

    q_bufs = gl.allocate_shared_memory(dt, [2, 64, HD], q_desc.layout)
    k_bufs = gl.allocate_shared_memory(dt, [NSTAGE, BN, HD], k_desc.layout)
    v_bufs = gl.allocate_shared_memory(
        v_desc.dtype, [NSTAGE] + v_desc.block_type.shape, v_desc.layout
    )
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    go_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [NSTAGE, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [NSTAGE, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [NSTAGE, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [NSTAGE, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    mbarrier.init(q_empty, count=2)
    mbarrier.init(go_bar, count=1)
    for i in gl.static_range(NSTAGE):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)
        mbarrier.init(v_empty.index(i), count=2)
    fence_async_shared()
    cargs = (
        out_ptr, osc_ptr, q_bufs, k_bufs, v_bufs, q_bar, q_empty, k_ready, v_ready, k_empty,
        v_empty, go_bar, n_items, pid, nprog, BH, H, G, SKV, n_m, sob, soh, sos, qk_scale,
        causal, causal_off, qs_ptr, ks_ptr, vs_ptr, scale_bits, sf_ptr, nmb, nmh, nms, nch,
        nv_k, nv_kbpad,
    )  # fmt: skip
    pargs = (
        q_desc, k_desc, v_desc, q_bufs, k_bufs, v_bufs, q_bar, q_empty, k_ready, v_ready, k_empty,
        v_empty, n_items, pid, nprog, BH, H, G, SKV, n_m, causal, causal_off, q_rb, q_rh, q_ch,
        k_rb, k_rh, k_ch, v_rb, v_rh, v_ch,
    )  # fmt: skip
    # the consumer index travels as a constexpr (it picks the Q buffer, the row block and the
    # side of the start offset)
    gl.warp_specialize(
        [(_consume, (0,) + cargs), (_consume, (1,) + cargs), (_producer, pargs)],
        [4, 1],
        [CONSUMER_REGS, 24],
    )
