"""Device helpers of the decode kernels (``decode_kernels.py``): the query prologue, the KV
tile walk (block-table gather, optional look-ahead, register double-buffering), the
online-softmax step in either orientation, the epilogue, and in-kernel zeroing of the NVFP4
scale padding.

Orientation (``TRANS``): ``False`` computes ``S = q·Kᵀ`` with the query rows as the MMA's M
side (``q [RP, DP]``, K tile ``[DP, N]``, ``acc [RP, DP]``); ``True`` computes
``Sᵀ = K·qᵀ`` so the KV tile is the wide M side (K tile ``[N, DP]``, ``qT [DP, RP]``,
``accT [DP, RP]``) -- the shapes Hopper's wgmma accepts (M a multiple of 64), with the few
query rows as the narrow N side.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._common import store_attention_acc, swizzled_offset


@triton.jit
def q_prep(
    Q,
    qoff,
    sqh,
    heads,
    hmask,
    offs_d,
    D: tl.constexpr,
    QS,
    KS,
    sm_scale,
    HAS_QS: tl.constexpr,
    HAS_KS: tl.constexpr,
    Q_RESCALE: tl.constexpr,
    DOT_DT: tl.constexpr,
    RP: tl.constexpr,
):
    """Query rows ``heads`` (``[RP, DP]`` in DOT_DT) and their exp2-domain logit scales."""
    q = tl.load(
        Q + qoff + heads[:, None] * sqh + offs_d[None, :],
        mask=hmask[:, None] & (offs_d[None, :] < D),
        other=0.0,
    ).to(tl.float32)
    qk_scale = tl.full([RP], sm_scale * 1.4426950408889634, tl.float32)
    if Q_RESCALE:
        # bf16/fp32 q for an fp16 dot (FP8 -> fp16 is one instruction, -> bf16 several):
        # scale each row by a power of two (exact) so its amax lands in [128, 256)
        amax = tl.max(tl.abs(q), 1)
        e = (amax.to(tl.int32, bitcast=True) >> 23) & 0xFF
        fe = tl.minimum(tl.maximum(261 - e, 1), 253)
        factor = tl.where(amax > 0.0, (fe << 23).to(tl.float32, bitcast=True), 1.0)
        inv = tl.where(amax > 0.0, ((254 - fe) << 23).to(tl.float32, bitcast=True), 1.0)
        q = q * factor[:, None]
        qk_scale = qk_scale * inv
    if HAS_QS:
        qk_scale = qk_scale * tl.load(QS).to(tl.float32)
    if HAS_KS:
        qk_scale = qk_scale * tl.load(KS).to(tl.float32)
    return q.to(DOT_DT), qk_scale


@triton.jit
def _block_ids(
    BT,
    b,
    sbt,
    start,
    hi,
    PAGE: tl.constexpr,
    tok_off,
    PAGED: tl.constexpr,
    ONE_PAGE: tl.constexpr,
):
    """Cache block of each tile row (int64, 0 where masked); one scalar when the whole tile
    lies in one cache block (ONE_PAGE: tiles never straddle blocks)."""
    if PAGED:
        if ONE_PAGE:
            blk = tl.load(BT + b * sbt + start // PAGE, mask=start < hi, other=0).to(tl.int64)
        else:
            tok = start + tok_off
            page = (tok.to(tl.uint32) // PAGE).to(tl.int32)  # tok >= 0: a shift, no sign fix
            blk = tl.load(BT + b * sbt + page, mask=tok < hi, other=0).to(tl.int64)
    else:
        blk = tl.zeros_like(tok_off).to(tl.int64)  # dense KV: unused
    return blk


@triton.jit
def _kv_load(
    K,
    V,
    blk,
    b,
    start,
    hi,
    tok_off,
    head_off,
    rmask,
    PAGE: tl.constexpr,
    skb,
    skh,
    skt,
    svb,
    svh,
    svt,
    offs_d,
    dmask,
    PAGED: tl.constexpr,
    ROW_MASK: tl.constexpr,
    K_ROWS: tl.constexpr,
):
    """K tile (``[N, DP]`` if K_ROWS else ``[DP, N]``), V tile ``[N, DP]`` and the row mask
    for tile rows ``start + tok_off`` of KV heads ``head_off`` (scalar or per row)."""
    tok = start + tok_off
    tmask = tok < hi
    if ROW_MASK:
        tmask = tmask & rmask
    if PAGED:
        slot = (tok.to(tl.uint32) % PAGE).to(tl.int64)
        k_rows = blk * skb + slot * skt + head_off * skh
        v_rows = blk * svb + slot * svt + head_off * svh
    else:
        k_rows = b * skb + head_off * skh + tok.to(tl.int64) * skt
        v_rows = b * svb + head_off * svh + tok.to(tl.int64) * svt
    if K_ROWS:
        k = tl.load(
            K + k_rows[:, None] + offs_d[None, :], mask=tmask[:, None] & dmask[None, :], other=0.0
        )
    else:
        k = tl.load(
            K + k_rows[None, :] + offs_d[:, None], mask=tmask[None, :] & dmask[:, None], other=0.0
        )
    v = tl.load(
        V + v_rows[:, None] + offs_d[None, :], mask=tmask[:, None] & dmask[None, :], other=0.0
    )
    return k, v, tmask


@triton.jit
def _attend(
    q,
    k,
    v,
    tmask,
    pair,
    acc,
    m_i,
    l_i,
    qk_scale,
    DOT_DT: tl.constexpr,
    TRANS: tl.constexpr,
    PAIRED: tl.constexpr,
):
    """One online-softmax step over a KV tile (exp2 domain). ``pair``: which (query row, tile
    row) pairs belong together (PAIRED; several KV heads in one tile)."""
    if TRANS:
        s = tl.dot(k.to(DOT_DT), q) * qk_scale[None, :]
        ok = tmask[:, None]
        if PAIRED:
            ok = ok & pair
        s = tl.where(ok, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 0))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s - m_use[None, :])
        alpha = tl.math.exp2(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, 0)
        acc = tl.dot(tl.trans(v.to(DOT_DT)), p.to(DOT_DT), acc * alpha[None, :])
    else:
        s = tl.dot(q, k.to(DOT_DT)) * qk_scale[:, None]
        ok = tmask[None, :]
        if PAIRED:
            ok = ok & pair
        s = tl.where(ok, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s - m_use[:, None])
        alpha = tl.math.exp2(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(DOT_DT), v.to(DOT_DT), acc * alpha[:, None])
    return acc, m_new, l_i


@triton.jit
def walk_kv(
    q,
    qk_scale,
    pair,
    acc,
    m_i,
    l_i,
    K,
    V,
    BT,
    b,
    lo,
    hi,
    sbt,
    PAGE: tl.constexpr,
    tok_off,
    head_off,
    rmask,
    skb,
    skh,
    skt,
    svb,
    svh,
    svt,
    offs_d,
    dmask,
    DOT_DT: tl.constexpr,
    PAGED: tl.constexpr,
    ONE_PAGE: tl.constexpr,
    TRANS: tl.constexpr,
    PAIRED: tl.constexpr,
    ROW_MASK: tl.constexpr,
    PREFETCH: tl.constexpr,
    BT_AHEAD: tl.constexpr,
    STEP: tl.constexpr,
):
    """Online softmax over tokens ``lo .. hi-1`` in tiles of STEP tokens.

    PREFETCH: tile i+1's loads are issued before tile i is used (registers double-buffer;
    the loop itself is not software-pipelined). BT_AHEAD: block-table entries are read one
    tile ahead of the KV loads that use them, so a KV load never waits on a table load.
    """
    if PREFETCH:
        blk = _block_ids(BT, b, sbt, lo, hi, PAGE, tok_off, PAGED, ONE_PAGE)
        k, v, tm = _kv_load(
            K,
            V,
            blk,
            b,
            lo,
            hi,
            tok_off,
            head_off,
            rmask,
            PAGE,
            skb,
            skh,
            skt,
            svb,
            svh,
            svt,
            offs_d,
            dmask,
            PAGED,
            ROW_MASK,
            TRANS,
        )
        if BT_AHEAD:
            blk = _block_ids(BT, b, sbt, lo + STEP, hi, PAGE, tok_off, PAGED, ONE_PAGE)
        for start in tl.range(lo, hi, STEP, num_stages=1):
            k_c, v_c, t_c = k, v, tm
            nxt = start + STEP
            if BT_AHEAD:
                blk_n = _block_ids(BT, b, sbt, nxt + STEP, hi, PAGE, tok_off, PAGED, ONE_PAGE)
            else:
                blk = _block_ids(BT, b, sbt, nxt, hi, PAGE, tok_off, PAGED, ONE_PAGE)
            k, v, tm = _kv_load(
                K,
                V,
                blk,
                b,
                nxt,
                hi,
                tok_off,
                head_off,
                rmask,
                PAGE,
                skb,
                skh,
                skt,
                svb,
                svh,
                svt,
                offs_d,
                dmask,
                PAGED,
                ROW_MASK,
                TRANS,
            )
            if BT_AHEAD:
                blk = blk_n
            acc, m_i, l_i = _attend(
                q, k_c, v_c, t_c, pair, acc, m_i, l_i, qk_scale, DOT_DT, TRANS, PAIRED
            )
    elif BT_AHEAD:
        blk = _block_ids(BT, b, sbt, lo, hi, PAGE, tok_off, PAGED, ONE_PAGE)
        for start in tl.range(lo, hi, STEP):
            blk_n = _block_ids(BT, b, sbt, start + STEP, hi, PAGE, tok_off, PAGED, ONE_PAGE)
            k, v, tm = _kv_load(
                K,
                V,
                blk,
                b,
                start,
                hi,
                tok_off,
                head_off,
                rmask,
                PAGE,
                skb,
                skh,
                skt,
                svb,
                svh,
                svt,
                offs_d,
                dmask,
                PAGED,
                ROW_MASK,
                TRANS,
            )
            blk = blk_n
            acc, m_i, l_i = _attend(
                q, k, v, tm, pair, acc, m_i, l_i, qk_scale, DOT_DT, TRANS, PAIRED
            )
    else:
        for start in tl.range(lo, hi, STEP):
            blk = _block_ids(BT, b, sbt, start, hi, PAGE, tok_off, PAGED, ONE_PAGE)
            k, v, tm = _kv_load(
                K,
                V,
                blk,
                b,
                start,
                hi,
                tok_off,
                head_off,
                rmask,
                PAGE,
                skb,
                skh,
                skt,
                svb,
                svh,
                svt,
                offs_d,
                dmask,
                PAGED,
                ROW_MASK,
                TRANS,
            )
            acc, m_i, l_i = _attend(
                q, k, v, tm, pair, acc, m_i, l_i, qk_scale, DOT_DT, TRANS, PAIRED
            )
    return acc, m_i, l_i


@triton.jit
def zero_sf_pad(SF, M, KBPAD, pid, nprog, PADW: tl.constexpr):
    """Zeroes the swizzled NVFP4 scale bytes of padding rows ``M .. round_up(M, 128) - 1``
    (every column of ``KBPAD``, a multiple of 4); program ``pid`` of ``nprog`` takes an equal
    share. A row's 4 columns of one column tile are one aligned 32-bit word of the swizzled
    layout, so the zeros go out as words. The real rows are written by the quantizer (no
    byte is written twice), so any program of the launch may do this."""
    kt = KBPAD // 4
    n = ((M + 127) // 128 * 128 - M) * kt  # words
    per = (n + nprog - 1) // nprog
    lo = pid * per
    hi = tl.minimum(lo + per, n)
    SFW = SF.to(tl.pointer_type(tl.int32), bitcast=True)
    for s in tl.range(lo, hi, PADW):
        offs = s + tl.arange(0, PADW)
        r = M + offs // kt
        byte = swizzled_offset(r, (offs % kt) * 4, kt)
        tl.store(SFW + byte // 4, tl.zeros([PADW], tl.int32), mask=offs < hi)


@triton.jit
def finish(
    acc,
    m_i,
    l_i,
    b,
    heads,
    hmask,
    split,
    nsplit,
    HQ,
    PO,
    PML,
    VS,
    OSC,
    OUT,
    SF,
    sob,
    soh,
    D: tl.constexpr,
    NV_M,
    NV_K,
    NV_KBPAD,
    pid,
    nprog,
    HAS_VS: tl.constexpr,
    SPLIT_OUT: tl.constexpr,
    OUT_KIND: tl.constexpr,
    SF_PAD: tl.constexpr,
    DP: tl.constexpr,
):
    """Writes a program's rows ``acc [RP, DP]``: the unnormalised partials (SPLIT_OUT; PO
    ``[B, HQ, S, DP]`` fp32, PML ``[B, HQ, S, 2]`` (max, sum)) or the final output."""
    offs_d = tl.arange(0, DP)
    if SPLIT_OUT:
        base = (b * HQ + heads) * nsplit + split
        tl.store(PO + base[:, None] * DP + offs_d[None, :], acc, mask=hmask[:, None])
        tl.store(PML + base * 2, m_i, mask=hmask)
        tl.store(PML + base * 2 + 1, l_i, mask=hmask)
    else:
        o_scale = tl.full([], 1.0, tl.float32)
        if HAS_VS:
            o_scale = tl.load(VS).to(tl.float32)
        inv_l = tl.where(l_i > 0.0, o_scale / l_i, 0.0)
        row_off = b * sob + heads.to(tl.int64) * soh
        store_attention_acc(
            acc, inv_l, row_off, row_off // NV_K, row_off % NV_K, hmask, OUT, OSC, SF,
            D, NV_K, NV_KBPAD, OUT_KIND, DP,
        )  # fmt: skip
    if OUT_KIND == 2:
        if SF_PAD:  # also with split partials: the merge writes real rows only
            zero_sf_pad(SF, NV_M, NV_KBPAD, pid, nprog, 128)
