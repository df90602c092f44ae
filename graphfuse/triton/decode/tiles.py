"""Device helpers of the decode kernels (``kernels.py``): the query prologue, the KV tile
walk (block-table gather, register double-buffering or Triton's pipeliner), the
online-softmax step and the epilogue (the NVFP4 scale padding is ``formats.zero_sf_pad``'s).

A program's query rows (the ``G`` heads of one KV head, padded to 16 for the tensor cores) are
the MMA's M side: ``S = q·Kᵀ`` with ``q [RP, DP]`` and the K tile loaded ``[DP, N]``.
``kv`` is the tuple ``(K, V, skb, skt, svb, svt)``: the K / V pointers at this program's
(sequence, KV head) and the strides of a cache block (dense KV: unused) and of a token.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..epilogue import store_attention_acc


@triton.jit
def q_prep(
    Q, heads, hmask, offs_d, D: tl.constexpr, QS, KS, sm_scale,
    HAS_QS: tl.constexpr, HAS_KS: tl.constexpr, Q_RESCALE: tl.constexpr, DOT_DT: tl.constexpr,
):  # fmt: skip
    """Query rows ``Q + heads`` (``[RP, DP]`` in DOT_DT) and their exp2-domain logit scales."""
    q = tl.load(
        Q + heads[:, None] + offs_d[None, :],
        mask=hmask[:, None] & (offs_d[None, :] < D),
        other=0.0,
    ).to(tl.float32)
    qk_scale = tl.full(heads.shape, sm_scale * 1.4426950408889634, tl.float32)
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
def _block_ids(BT_row, start, bt_hi, PAGE: tl.constexpr, offs_n, PAGED: tl.constexpr):
    """Cache block of each token ``start + offs_n`` below ``bt_hi`` (int64, 0 where masked or
    dense). ``bt_hi`` bounds the table row, not the sequence: the entries past the sequence's
    length are read too (the KV loads that would use them are masked), so this load does not
    wait for the length's."""
    if PAGED:
        tok = start + offs_n
        page = (tok.to(tl.uint32) // PAGE).to(tl.int32)  # tok >= 0: a shift, no sign fix
        blk = tl.load(BT_row + page, mask=tok < bt_hi, other=0).to(tl.int64)
    else:
        blk = tl.zeros_like(offs_n).to(tl.int64)
    return blk


@triton.jit
def _kv_load(kv, blk, start, hi, offs_n, PAGE: tl.constexpr, offs_d, dmask, PAGED: tl.constexpr):
    """K tile ``[DP, N]``, V tile ``[N, DP]`` and the token mask of tokens ``start + offs_n``."""
    K, V, skb, skt, svb, svt = kv
    tok = start + offs_n
    tmask = tok < hi
    if PAGED:
        slot = (tok.to(tl.uint32) % PAGE).to(tl.int64)
        k_rows = blk * skb + slot * skt
        v_rows = blk * svb + slot * svt
    else:
        k_rows = tok.to(tl.int64) * skt
        v_rows = tok.to(tl.int64) * svt
    kmask = tmask[None, :] & dmask[:, None]
    k = tl.load(K + k_rows[None, :] + offs_d[:, None], mask=kmask, other=0.0)
    vmask = tmask[:, None] & dmask[None, :]
    v = tl.load(V + v_rows[:, None] + offs_d[None, :], mask=vmask, other=0.0)
    return k, v, tmask


@triton.jit
def _fp8_to_f16(v):
    """e4m3 -> fp16 (exact) in registers, as an opaque conversion (inline asm marked impure,
    which the compiler leaves where it is; element 0 of each 4 is the low byte of ``$2``, two
    fp16 per output register, as Triton packs inline-asm operands). A plain ``.to()`` of the
    FP8 V tile is folded by Triton into the P·V operand load from shared memory; V's operand
    needs its tokens (rows) contiguous, so that load gathers single bytes (128 ``ld.shared.b8``
    a thread per 128-token tile). Converted first, V takes the 16-bit path: 16-byte copies
    into shared memory, one fp16 store, ``ldmatrix.trans``."""
    return tl.inline_asm_elementwise(
        "{.reg .b16 lo, hi; mov.b32 {lo, hi}, $2; "
        "cvt.rn.f16x2.e4m3x2 $0, lo; cvt.rn.f16x2.e4m3x2 $1, hi;}",
        "=r,=r,r", [v.to(tl.uint8, bitcast=True)], dtype=tl.float16, is_pure=False, pack=4,
    )  # fmt: skip


@triton.jit
def _attend(q, k, v, tmask, acc, m_i, l_i, qk_scale, DOT_DT: tl.constexpr):
    """One online-softmax step over a KV tile (exp2 domain)."""
    s = tl.dot(q, k.to(DOT_DT)) * qk_scale[:, None]
    s = tl.where(tmask[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.math.exp2(s - m_use[:, None])
    alpha = tl.math.exp2(m_i - m_use)
    l_i = l_i * alpha + tl.sum(p, 1)
    if v.dtype == tl.float8e4nv:
        v = _fp8_to_f16(v)  # DOT_DT is fp16 for an FP8 cache
    acc = tl.dot(p.to(DOT_DT), v.to(DOT_DT), acc * alpha[:, None])
    return acc, m_new, l_i


@triton.jit
def walk_kv(
    q, qk_scale, acc, m_i, l_i, kv, BT_row, lo, hi, bt_hi, PAGE: tl.constexpr, offs_n, offs_d,
    dmask, DOT_DT: tl.constexpr, PAGED: tl.constexpr, PREFETCH: tl.constexpr,
    BT_AHEAD: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """Online softmax over tokens ``lo .. hi-1`` in tiles of BLOCK_N tokens (``bt_hi``: the
    end of this split's part of the block-table row, ``_block_ids``).

    PREFETCH: tile i+1's loads are issued before tile i is used (registers double-buffer;
    the loop itself is not software-pipelined); otherwise Triton's pipeliner overlaps them.
    BT_AHEAD: block-table entries are read one tile ahead of the KV loads that use them, so a
    KV load never waits on a table load (with the pipeliner, K/V then get ``num_stages - 1``
    shared-memory buffers instead of one).
    """
    if PREFETCH:  # tile lo's loads before the loop
        blk = _block_ids(BT_row, lo, bt_hi, PAGE, offs_n, PAGED)
        k, v, tm = _kv_load(kv, blk, lo, hi, offs_n, PAGE, offs_d, dmask, PAGED)
        if BT_AHEAD:
            blk = _block_ids(BT_row, lo + BLOCK_N, bt_hi, PAGE, offs_n, PAGED)
    elif BT_AHEAD:
        blk = _block_ids(BT_row, lo, bt_hi, PAGE, offs_n, PAGED)
    for start in tl.range(lo, hi, BLOCK_N, num_stages=1 if PREFETCH else None):
        nxt = start  # the tile loaded in this iteration
        if PREFETCH:
            k_c, v_c, t_c = k, v, tm
            nxt = start + BLOCK_N
        if BT_AHEAD:
            blk_n = _block_ids(BT_row, nxt + BLOCK_N, bt_hi, PAGE, offs_n, PAGED)
        else:
            blk = _block_ids(BT_row, nxt, bt_hi, PAGE, offs_n, PAGED)
        k, v, tm = _kv_load(kv, blk, nxt, hi, offs_n, PAGE, offs_d, dmask, PAGED)
        if BT_AHEAD:
            blk = blk_n
        if PREFETCH:
            acc, m_i, l_i = _attend(q, k_c, v_c, t_c, acc, m_i, l_i, qk_scale, DOT_DT)
        else:
            acc, m_i, l_i = _attend(q, k, v, tm, acc, m_i, l_i, qk_scale, DOT_DT)
    return acc, m_i, l_i


@triton.jit
def write_rows(
    acc, l_i, b, heads, hmask, VS, OSC, OUT, SF, sob, soh, D, NV_K, NV_KBPAD,
    HAS_VS: tl.constexpr, OUT_KIND: tl.constexpr, DP: tl.constexpr,
):  # fmt: skip
    """Writes the final rows ``acc / l_i * v_scale`` of (sequence ``b``, heads ``heads``) at
    ``b * sob + head * soh`` (NVFP4: the same offset in the ``[M, NV_K]`` view)."""
    o_scale = tl.full([], 1.0, tl.float32)
    if HAS_VS:
        o_scale = tl.load(VS).to(tl.float32)
    inv_l = tl.where(l_i > 0.0, o_scale / l_i, 0.0)
    row_off = b * sob + heads.to(tl.int64) * soh
    store_attention_acc(
        acc, inv_l, row_off, row_off // NV_K, row_off % NV_K, hmask, OUT, OSC, SF,
        D, NV_K, NV_KBPAD, OUT_KIND, DP,
    )  # fmt: skip


@triton.jit
def merge_splits(PO, PML, rows, rmask, nsplit, offs_d, SC: tl.constexpr, DP: tl.constexpr):
    """The split partials of ``rows`` (flat ``b * HQ + head``) merged, SC splits a step:
    ``acc = sum_s 2^(m_s - m) acc_s`` and ``l = sum_s 2^(m_s - m) l_s`` with ``m`` the
    largest ``m_s`` (rows whose splits saw no token: 0 and 0)."""
    m = tl.full(rows.shape, float("-inf"), tl.float32)
    l_tot = tl.zeros(rows.shape, tl.float32)
    o = tl.zeros([rows.shape[0], DP], tl.float32)
    offs_s = tl.arange(0, SC)
    for s0 in range(0, nsplit, SC):
        smask = rmask[:, None] & (s0 + offs_s < nsplit)[None, :]
        base = rows.to(tl.int64)[:, None] * nsplit + s0 + offs_s[None, :]
        ms = tl.load(PML + base * 2, mask=smask, other=float("-inf"))
        ls = tl.load(PML + base * 2 + 1, mask=smask, other=0.0)
        part = tl.load(
            PO + base[:, :, None] * DP + offs_d[None, None, :], mask=smask[:, :, None], other=0.0
        )
        m_new = tl.maximum(m, tl.max(ms, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        w = tl.math.exp2(ms - m_use[:, None])
        alpha = tl.math.exp2(m - m_use)
        o = o * alpha[:, None] + tl.sum(part * w[:, :, None], 1)
        l_tot = l_tot * alpha + tl.sum(w * ls, 1)
        m = m_new
    return o, l_tot
