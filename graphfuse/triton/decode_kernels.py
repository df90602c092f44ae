"""Triton split-KV decode kernels (one query token per sequence) and the split merge kernel;
launched by ``decode.py`` (device helpers in ``decode_tiles.py``).

``decode_head``: grid ``(B, Hkv, splits)`` (or ``(Hkv, B, splits)`` with HEAD_MAJOR, so the
programs of one sequence's KV heads run side by side); a program takes the ``G = Hq / Hkv``
query heads of one KV head (padded to 16 rows for the tensor cores). Paged or dense KV.

``decode_seq`` (paged only): grid ``(B, splits)``; a program takes every query head of one
sequence and reads whole cache blocks -- tile rows are (token, KV head) pairs, so a tile of
one cache block is the block's contiguous ``[block_size, Hkv, D]`` K (and V) bytes. Both dots
cover all pairs; a pairing mask keeps query head ``h`` on KV head ``h // G`` (the other
logits are -inf, their probabilities exactly 0), so the result equals the per-head kernel's.

With one split a kernel writes the final output itself; with more, each split writes its
unnormalised partial (fp32 acc, running max, sum) and ``decode_merge`` combines them and then
quantizes (FP8 / NVFP4 / 16-bit): the quantizer sees the merged output, never a partial.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._common import store_attention_acc
from .decode_tiles import finish, q_prep, walk_kv


@triton.jit
def decode_head(
    Q,
    K,
    V,
    QS,
    KS,
    VS,
    BT,
    LENS,
    OSC,
    OUT,
    SF,
    PO,
    PML,
    sqb,
    sqh,
    skb,
    skh,
    skt,
    svb,
    svh,
    svt,
    sbt,
    PAGE: tl.constexpr,
    HQ,
    G,
    SKV,
    D: tl.constexpr,
    sm_scale,
    CHUNK,
    sob,
    soh,
    NV_M,
    NV_K,
    NV_KBPAD,
    HAS_QS: tl.constexpr,
    HAS_KS: tl.constexpr,
    HAS_VS: tl.constexpr,
    PAGED: tl.constexpr,
    SPLIT_OUT: tl.constexpr,
    OUT_KIND: tl.constexpr,
    DOT_DT: tl.constexpr,
    Q_RESCALE: tl.constexpr,
    GP: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DP: tl.constexpr,
    PREFETCH: tl.constexpr,
    TRANS: tl.constexpr,
    BT_AHEAD: tl.constexpr,
    HEAD_MAJOR: tl.constexpr,
    ONE_PAGE: tl.constexpr,
    SF_PAD: tl.constexpr,
):
    if HEAD_MAJOR:
        hk = tl.program_id(0).to(tl.int64)
        b = tl.program_id(1).to(tl.int64)
    else:
        b = tl.program_id(0).to(tl.int64)
        hk = tl.program_id(1).to(tl.int64)
    split = tl.program_id(2)
    nsplit = tl.num_programs(2)
    offs_g = tl.arange(0, GP)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, DP)
    heads = hk * G + offs_g
    gmask = offs_g < G
    dmask = offs_d < D
    q, qk_scale = q_prep(
        Q, b * sqb, sqh, heads, gmask, offs_d, D, QS, KS, sm_scale,
        HAS_QS, HAS_KS, Q_RESCALE, DOT_DT, GP,
    )  # fmt: skip
    if PAGED:
        seq_len = tl.load(LENS + b)
    else:
        seq_len = SKV
    lo = split * CHUNK
    hi = tl.minimum(lo + CHUNK, seq_len)
    m_i = tl.full([GP], float("-inf"), tl.float32)
    l_i = tl.zeros([GP], tl.float32)
    if TRANS:
        q = tl.trans(q)
        acc = tl.zeros([DP, GP], tl.float32)
    else:
        acc = tl.zeros([GP, DP], tl.float32)
    acc, m_i, l_i = walk_kv(
        q, qk_scale, gmask, acc, m_i, l_i, K, V, BT, b, lo, hi, sbt, PAGE,
        offs_n, hk, gmask, skb, skh, skt, svb, svh, svt, offs_d, dmask,
        DOT_DT, PAGED, ONE_PAGE, TRANS, False, False, PREFETCH, BT_AHEAD, BLOCK_N,
    )  # fmt: skip
    if TRANS:
        acc = tl.trans(acc)
    np0 = tl.num_programs(0)
    np1 = tl.num_programs(1)
    pid = (split * np1 + tl.program_id(1)) * np0 + tl.program_id(0)
    finish(
        acc, m_i, l_i, b, heads, gmask, split, nsplit, HQ, PO, PML, VS, OSC, OUT, SF,
        sob, soh, D, NV_M, NV_K, NV_KBPAD, pid, np0 * np1 * nsplit,
        HAS_VS, SPLIT_OUT, OUT_KIND, SF_PAD, DP,
    )  # fmt: skip


@triton.jit
def decode_seq(
    Q,
    K,
    V,
    QS,
    KS,
    VS,
    BT,
    LENS,
    OSC,
    OUT,
    SF,
    PO,
    PML,
    sqb,
    sqh,
    skb,
    skh,
    skt,
    svb,
    svh,
    svt,
    sbt,
    PAGE: tl.constexpr,
    HQ,
    HKV,
    G,
    D: tl.constexpr,
    sm_scale,
    CHUNK,
    sob,
    soh,
    NV_M,
    NV_K,
    NV_KBPAD,
    HAS_QS: tl.constexpr,
    HAS_KS: tl.constexpr,
    HAS_VS: tl.constexpr,
    SPLIT_OUT: tl.constexpr,
    OUT_KIND: tl.constexpr,
    DOT_DT: tl.constexpr,
    Q_RESCALE: tl.constexpr,
    HQP: tl.constexpr,
    HKVP: tl.constexpr,
    BLOCK_T: tl.constexpr,
    DP: tl.constexpr,
    PREFETCH: tl.constexpr,
    TRANS: tl.constexpr,
    BT_AHEAD: tl.constexpr,
    ONE_PAGE: tl.constexpr,
    SF_PAD: tl.constexpr,
):
    R: tl.constexpr = BLOCK_T * HKVP  # tile rows: (token, KV head), head fastest
    b = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    nsplit = tl.num_programs(1)
    offs_h = tl.arange(0, HQP)
    offs_r = tl.arange(0, R)
    offs_d = tl.arange(0, DP)
    r_tok = offs_r // HKVP
    r_head = offs_r % HKVP
    hmask = offs_h < HQ
    dmask = offs_d < D
    q, qk_scale = q_prep(
        Q, b * sqb, sqh, offs_h, hmask, offs_d, D, QS, KS, sm_scale,
        HAS_QS, HAS_KS, Q_RESCALE, DOT_DT, HQP,
    )  # fmt: skip
    q_kv = offs_h // G
    if TRANS:
        q = tl.trans(q)
        pair = r_head[:, None] == q_kv[None, :]
        acc = tl.zeros([DP, HQP], tl.float32)
    else:
        pair = q_kv[:, None] == r_head[None, :]
        acc = tl.zeros([HQP, DP], tl.float32)
    seq_len = tl.load(LENS + b)
    lo = split * CHUNK
    hi = tl.minimum(lo + CHUNK, seq_len)
    m_i = tl.full([HQP], float("-inf"), tl.float32)
    l_i = tl.zeros([HQP], tl.float32)
    acc, m_i, l_i = walk_kv(
        q, qk_scale, pair, acc, m_i, l_i, K, V, BT, b, lo, hi, sbt, PAGE,
        r_tok, r_head, r_head < HKV, skb, skh, skt, svb, svh, svt, offs_d, dmask,
        DOT_DT, True, ONE_PAGE, TRANS, True, HKVP != HKV, PREFETCH, BT_AHEAD, BLOCK_T,
    )  # fmt: skip
    if TRANS:
        acc = tl.trans(acc)
    pid = split * tl.num_programs(0) + tl.program_id(0)
    finish(
        acc, m_i, l_i, b, offs_h, hmask, split, nsplit, HQ, PO, PML, VS, OSC, OUT, SF,
        sob, soh, D, NV_M, NV_K, NV_KBPAD, pid, tl.num_programs(0) * nsplit,
        HAS_VS, SPLIT_OUT, OUT_KIND, SF_PAD, DP,
    )  # fmt: skip


@triton.jit
def decode_merge(
    PO,
    PML,
    VS,
    OSC,
    OUT,
    SF,
    NROWS,
    HQ,
    D,
    sob,
    soh,
    NV_M,
    NV_K,
    NV_KBPAD,
    NSPLIT: tl.constexpr,
    SP: tl.constexpr,
    HAS_VS: tl.constexpr,
    OUT_KIND: tl.constexpr,
    RH: tl.constexpr,
    DP: tl.constexpr,
):
    """One program merges RH (batch, head) rows: out = sum_s w_s acc_s / sum_s w_s l_s."""
    rows = tl.program_id(0) * RH + tl.arange(0, RH)  # flat b * HQ + h
    rmask = rows < NROWS
    offs_s = tl.arange(0, SP)
    smask = offs_s < NSPLIT
    base = rows.to(tl.int64)[:, None] * NSPLIT + offs_s[None, :]
    lmask = rmask[:, None] & smask[None, :]
    m = tl.load(PML + base * 2, mask=lmask, other=float("-inf"))
    lsum = tl.load(PML + base * 2 + 1, mask=lmask, other=0.0)
    m_max = tl.max(m, 1)
    m_max = tl.where(m_max == float("-inf"), 0.0, m_max)
    w = tl.math.exp2(m - m_max[:, None])
    l_tot = tl.sum(w * lsum, 1)
    offs_d = tl.arange(0, DP)
    o = tl.zeros([RH, DP], tl.float32)
    for s in tl.static_range(NSPLIT):
        ws = tl.sum(tl.where(offs_s[None, :] == s, w, 0.0), 1)
        part = tl.load(
            PO + (rows.to(tl.int64) * NSPLIT + s)[:, None] * DP + offs_d[None, :],
            mask=rmask[:, None],
            other=0.0,
        )
        o += part * ws[:, None]
    o_scale = tl.full([], 1.0, tl.float32)
    if HAS_VS:
        o_scale = tl.load(VS).to(tl.float32)
    inv_l = tl.where(l_tot > 0.0, o_scale / l_tot, 0.0)
    bb = (rows // HQ).to(tl.int64)
    hh = (rows % HQ).to(tl.int64)
    row_off = bb * sob + hh * soh
    store_attention_acc(
        o, inv_l, row_off, row_off // NV_K, row_off % NV_K, rmask, OUT, OSC, SF,
        D, NV_K, NV_KBPAD, OUT_KIND, DP,
    )  # fmt: skip
