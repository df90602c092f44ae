"""The plain Triton prefill kernel (``attention_kernel``; any Sq, every op argument), the
fallback of the warp-specialised Gluon kernel (``gluon_kernel.py``; the rule is in
``prefill/__init__.py``), and the byte transpose behind fast mode's K-major V copies.

One program computes ``BLOCK_M`` query rows of one (batch, q head) with an online softmax
over ``BLOCK_N``-key tiles (FlashAttention-2 order, rescaling on every key tile, exp2 with the
scales folded in, row sums of the exact P), query row blocks launched heaviest-causal-first
(grid ``(B*H, M blocks)``), written by ``epilogue.store_attention_acc``. FP8 q and k multiply
on the FP8 tensor cores (K tile loaded as ``[D, N]``: K-major, what FP8 wgmma wants). P·V:
``precision="default"`` rounds P to fp16 (bf16 for bf16 v) and upcasts an FP8 V tile in
registers (e4m3 -> fp16 is exact); ``"fast"`` with FP8 v rounds ``256 * P`` to e4m3 and
multiplies on the FP8 tensor cores, which read V K-major (``launch.k_major``). Causal masks
split the key loop into unmasked tiles and the diagonal tiles, which alone pay for the mask.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..epilogue import store_attention_acc


@triton.jit
def _key_tiles(
    q, acc, m_i, l_i, k_ptrs, v_ptrs, mask_ptrs, lo, hi, sks, svs, smn, offs_m, offs_n,
    offs_d, D, SQ, SKV, qk_scale, causal_off, BOUNDS: tl.constexpr, CAUSAL: tl.constexpr,
    MASK_KIND: tl.constexpr, QK_DT: tl.constexpr, PV_DT: tl.constexpr, FAST: tl.constexpr,
    EVEN_D: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    for start_n in tl.range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        if BOUNDS or not EVEN_D:
            kmask = (offs_d[:, None] < D) & (cols[None, :] < SKV)
            k = tl.load(k_ptrs + start_n * sks, mask=kmask, other=0.0)
        else:
            k = tl.load(k_ptrs + start_n * sks)
        if QK_DT == tl.float32:
            qk = tl.dot(q, k.to(QK_DT), input_precision="ieee")
        else:
            qk = tl.dot(q, k.to(QK_DT))
        sc = qk_scale  # applied inside the exp2's FMA, not as a separate pass
        if MASK_KIND == 1:
            mk = tl.load(
                mask_ptrs + start_n * smn,
                mask=(offs_m[:, None] < SQ) & (cols[None, :] < SKV),
                other=0,
            )
            qk = tl.where(mk != 0, qk, float("-inf"))
        elif MASK_KIND == 2:
            ma = tl.load(
                mask_ptrs + start_n * smn,
                mask=(offs_m[:, None] < SQ) & (cols[None, :] < SKV),
                other=0.0,
            )
            qk = qk * qk_scale + ma.to(tl.float32) * 1.4426950408889634
            sc = 1.0
        if BOUNDS:
            keep = cols[None, :] < SKV
            if CAUSAL:
                keep = keep & (cols[None, :] <= offs_m[:, None] + causal_off)
            qk = tl.where(keep, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1) * sc)
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        if FAST:  # 256 * P (e4m3 keeps small probabilities normal), folded into exp2
            p = tl.math.exp2(qk * sc - (m_use - 8.0)[:, None])
            p8 = p.to(tl.float8e4nv)
        else:
            p = tl.math.exp2(qk * sc - m_use[:, None])
        alpha = tl.math.exp2(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        m_i = m_new
        if BOUNDS or not EVEN_D:
            vmask = (cols[:, None] < SKV) & (offs_d[None, :] < D)
            v = tl.load(v_ptrs + start_n * svs, mask=vmask, other=0.0)
        else:
            v = tl.load(v_ptrs + start_n * svs)
        if FAST:
            acc = tl.dot(p8, v, acc)
        elif PV_DT == tl.float32:
            acc = tl.dot(p, v.to(PV_DT), acc, input_precision="ieee")
        else:
            acc = tl.dot(p.to(PV_DT), v.to(PV_DT), acc)
    return acc, m_i, l_i


@triton.jit
def attention_kernel(
    Q, K, V, QS, KS, VS, MASK, OSC, OUT, SF, sqb, sqh, sqs, sqd, skb, skh, sks, skd, svb,
    svh, svs, svd, smb, smh, sms, smn, sob, soh, sos, H, G, SQ, SKV, D, sm_scale,
    causal_off, NV_K, NV_KBPAD, nmb, nmh, nms, nch, HAS_QS: tl.constexpr, HAS_KS:
    tl.constexpr, HAS_VS: tl.constexpr, MASK_KIND: tl.constexpr, CAUSAL: tl.constexpr,
    OUT_KIND: tl.constexpr, FAST: tl.constexpr, QK_DT: tl.constexpr, PV_DT: tl.constexpr,
    EVEN_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DP: tl.constexpr,
):  # fmt: skip
    # grid (B*H, M blocks), row blocks in reverse: every head's heaviest causal block first
    pid_m = tl.num_programs(1) - 1 - tl.program_id(1)
    pid_bh = tl.program_id(0)
    b = (pid_bh // H).to(tl.int64)
    h = (pid_bh % H).to(tl.int64)
    hk = h // G
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, DP)
    qmask = (offs_m[:, None] < SQ) & (offs_d[None, :] < D)
    q = tl.load(
        Q + b * sqb + h * sqh + offs_m[:, None] * sqs + offs_d[None, :] * sqd, mask=qmask, other=0.0
    ).to(QK_DT)
    qk_scale = sm_scale * 1.4426950408889634
    if HAS_QS:
        qk_scale = qk_scale * tl.load(QS).to(tl.float32)
    if HAS_KS:
        qk_scale = qk_scale * tl.load(KS).to(tl.float32)
    k_ptrs = K + b * skb + hk * skh + offs_d[:, None] * skd + offs_n[None, :] * sks
    v_ptrs = V + b * svb + hk * svh + offs_n[:, None] * svs + offs_d[None, :] * svd
    mask_ptrs = MASK + b * smb + h * smh + offs_m[:, None] * sms + offs_n[None, :] * smn
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, DP], tl.float32)
    start_m = pid_m * BLOCK_M
    if CAUSAL:
        full_end = (start_m + causal_off + 1) // BLOCK_N * BLOCK_N
        full_end = tl.maximum(tl.minimum(full_end, SKV // BLOCK_N * BLOCK_N), 0)
        hi = tl.maximum(tl.minimum(start_m + BLOCK_M + causal_off, SKV), 0)
    else:
        full_end = SKV // BLOCK_N * BLOCK_N
        hi = SKV
    for stage in tl.static_range(2):  # unmasked tiles, then the diagonal / bounds tiles
        if stage == 0:
            lo = 0
            hi_s = full_end
        else:
            lo = full_end
            hi_s = hi
        acc, m_i, l_i = _key_tiles(
            q, acc, m_i, l_i, k_ptrs, v_ptrs, mask_ptrs, lo, hi_s, sks, svs, smn,
            offs_m, offs_n, offs_d, D, SQ, SKV, qk_scale, causal_off, stage == 1,
            CAUSAL, MASK_KIND, QK_DT, PV_DT, FAST, EVEN_D, BLOCK_N,
        )  # fmt: skip
    o_scale = tl.full([], 1.0, tl.float32)
    if HAS_VS:
        o_scale = tl.load(VS).to(tl.float32)
    inv_l = tl.where(l_i > 0.0, o_scale / l_i, 0.0)
    row_off = b * sob + h * soh + offs_m.to(tl.int64) * sos
    nv_row = b * nmb + h * nmh + offs_m.to(tl.int64) * nms
    nv_col = h * nch + tl.zeros([BLOCK_M], tl.int64)
    store_attention_acc(
        acc, inv_l, row_off, nv_row, nv_col, offs_m < SQ, OUT, OSC, SF,
        D, NV_K, NV_KBPAD, OUT_KIND, DP,
    )  # fmt: skip


@triton.jit
def transpose_bytes(
    X, Y, H, S, D, sxb, sxh, sxs, sxd, BS: tl.constexpr, BD: tl.constexpr,
    WGMMA_KEYS: tl.constexpr,
):  # fmt: skip
    """``Y[b, h, d, s'] = X[b, h, s, d]`` (bytes, X of any strides; Y contiguous ``[B, H, D,
    S]``): ``s' = s``, or with ``WGMMA_KEYS`` the position ``config.wgmma_key_order`` gives
    key ``s`` (the Gluon kernel's fast-mode V^T; S a multiple of 16). The reorder is a
    gather of source rows, so the stores stay contiguous."""
    bh = tl.program_id(2).to(tl.int64)
    b = bh // H
    h = bh % H
    offs_s = tl.program_id(0) * BS + tl.arange(0, BS)
    offs_d = tl.program_id(1) * BD + tl.arange(0, BD)
    if WGMMA_KEYS:  # position 4t + 2u + e holds key 8u + 2t + e of its 16
        src = (offs_s & ~15) | ((offs_s & 12) >> 1) | ((offs_s & 2) << 2) | (offs_s & 1)
    else:
        src = offs_s
    m = (offs_s[:, None] < S) & (offs_d[None, :] < D)
    tile = tl.load(X + b * sxb + h * sxh + src[:, None] * sxs + offs_d[None, :] * sxd, mask=m)
    out = Y + bh * D * S + offs_d[:, None] * S + offs_s[None, :]
    tl.store(out, tl.trans(tile), mask=tl.trans(m))
