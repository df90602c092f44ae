"""Triton split-KV decode attention (one query token per sequence), paged or dense KV.

Grid ``(B, Hkv, splits)``: a program takes the ``G = Hq / Hkv`` query heads that share one KV
head (padded to 16 rows for the tensor cores), so every KV byte is read once, and walks its
split of the sequence in ``BLOCK_N``-token tiles (a paged tile gathers its tokens through the
block table). FP8 K/V tiles are upcast to 16 bits in registers (exact); the dequant scales
fold into the logit scale and the output. With one split the kernel writes the final output
itself; with more, each split writes its unnormalised partial (fp32 acc, running max, sum)
and a merge kernel combines them and then quantizes (FP8 / NVFP4 / 16-bit): the quantizer
sees the merged output, never a partial. Split counts depend on shapes only (no host sync).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ._common import TL_DTYPE, store_attention_out, zero_scale_padding

_SM_COUNT: dict[int, int] = {}


@triton.jit
def _kv_tile(
    K,
    V,
    BT,
    b,
    hk,
    start,
    hi,
    skb,
    skh,
    skt,
    svb,
    svh,
    svt,
    sbt,
    PAGE,
    offs_n,
    offs_d,
    dmask,
    PAGED: tl.constexpr,
):
    """K tile ``[DP, BLOCK_N]`` (K-major for the dot), V tile ``[BLOCK_N, DP]``, token mask."""
    tok = start + offs_n
    tmask = tok < hi
    if PAGED:
        blk = tl.load(BT + b * sbt + tok // PAGE, mask=tmask, other=0).to(tl.int64)
        slot = (tok % PAGE).to(tl.int64)
        k_rows = blk * skb + slot * skt + hk * skh
        v_rows = blk * svb + slot * svt + hk * svh
    else:
        k_rows = b * skb + hk * skh + tok.to(tl.int64) * skt
        v_rows = b * svb + hk * svh + tok.to(tl.int64) * svt
    k = tl.load(
        K + k_rows[None, :] + offs_d[:, None], mask=tmask[None, :] & dmask[:, None], other=0.0
    )
    v = tl.load(
        V + v_rows[:, None] + offs_d[None, :], mask=tmask[:, None] & dmask[None, :], other=0.0
    )
    return k, v, tmask


@triton.jit
def _attend(q, k, v, tmask, acc, m_i, l_i, qk_scale, DOT_DT: tl.constexpr):
    """One online-softmax step over a KV tile (exp2 domain)."""
    qk = tl.dot(q, k.to(DOT_DT)) * qk_scale[:, None]
    qk = tl.where(tmask[None, :], qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.math.exp2(qk - m_use[:, None])
    alpha = tl.math.exp2(m_i - m_use)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(DOT_DT), v.to(DOT_DT), acc * alpha[:, None])
    return acc, m_new, l_i


@triton.jit
def _decode_split(
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
    PAGE,
    G,
    SKV,
    D,
    sm_scale,
    CHUNK,
    sob,
    soh,
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
):
    b = tl.program_id(0).to(tl.int64)
    hk = tl.program_id(1).to(tl.int64)
    split = tl.program_id(2)
    nsplit = tl.num_programs(2)
    offs_g = tl.arange(0, GP)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, DP)
    heads = hk * G + offs_g
    gmask = offs_g < G
    q = tl.load(
        Q + b * sqb + heads[:, None] * sqh + offs_d[None, :],
        mask=gmask[:, None] & (offs_d[None, :] < D),
        other=0.0,
    ).to(tl.float32)
    qk_scale = tl.full([GP], sm_scale * 1.4426950408889634, tl.float32)
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
    q = q.to(DOT_DT)
    if HAS_QS:
        qk_scale = qk_scale * tl.load(QS).to(tl.float32)
    if HAS_KS:
        qk_scale = qk_scale * tl.load(KS).to(tl.float32)
    if PAGED:
        seq_len = tl.load(LENS + b)
    else:
        seq_len = SKV
    lo = split * CHUNK
    hi = tl.minimum(lo + CHUNK, seq_len)
    m_i = tl.full([GP], float("-inf"), tl.float32)
    l_i = tl.zeros([GP], tl.float32)
    acc = tl.zeros([GP, DP], tl.float32)
    dmask = offs_d < D
    if PREFETCH:  # registers double-buffer: tile i+1's loads are in flight during tile i
        k, v, tmask = _kv_tile(
            K,
            V,
            BT,
            b,
            hk,
            lo,
            hi,
            skb,
            skh,
            skt,
            svb,
            svh,
            svt,
            sbt,
            PAGE,
            offs_n,
            offs_d,
            dmask,
            PAGED,
        )
        for start in tl.range(lo, hi, BLOCK_N, num_stages=1):
            k_c, v_c, t_c = k, v, tmask
            k, v, tmask = _kv_tile(
                K,
                V,
                BT,
                b,
                hk,
                start + BLOCK_N,
                hi,
                skb,
                skh,
                skt,
                svb,
                svh,
                svt,
                sbt,
                PAGE,
                offs_n,
                offs_d,
                dmask,
                PAGED,
            )
            acc, m_i, l_i = _attend(q, k_c, v_c, t_c, acc, m_i, l_i, qk_scale, DOT_DT)
    else:
        for start in tl.range(lo, hi, BLOCK_N):
            k, v, tmask = _kv_tile(
                K,
                V,
                BT,
                b,
                hk,
                start,
                hi,
                skb,
                skh,
                skt,
                svb,
                svh,
                svt,
                sbt,
                PAGE,
                offs_n,
                offs_d,
                dmask,
                PAGED,
            )
            acc, m_i, l_i = _attend(q, k, v, tmask, acc, m_i, l_i, qk_scale, DOT_DT)
    if SPLIT_OUT:
        # partials: PO [B, Hq, S, DP] fp32 (unnormalised), PML [B, Hq, S, 2] (max, sum)
        base = (b * (G * tl.num_programs(1)) + heads) * nsplit + split
        tl.store(PO + base[:, None] * DP + offs_d[None, :], acc, mask=gmask[:, None])
        tl.store(PML + base * 2, m_i, mask=gmask)
        tl.store(PML + base * 2 + 1, l_i, mask=gmask)
    else:
        o_scale = tl.full([], 1.0, tl.float32)
        if HAS_VS:
            o_scale = tl.load(VS).to(tl.float32)
        inv_l = tl.where(l_i > 0.0, o_scale / l_i, 0.0)
        row_off = b * sob + heads.to(tl.int64) * soh
        store_attention_out(
            acc * inv_l[:, None], row_off, gmask, OUT, OSC, SF, D, NV_K, NV_KBPAD, OUT_KIND, DP
        )


@triton.jit
def _decode_merge(
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
    store_attention_out(
        o * inv_l[:, None],
        bb * sob + hh * soh,
        rmask,
        OUT,
        OSC,
        SF,
        D,
        NV_K,
        NV_KBPAD,
        OUT_KIND,
        DP,
    )


def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":  # the Triton CPU interpreter (development only)
        return 132
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _SM_COUNT:
        _SM_COUNT[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _SM_COUNT[idx]


def choose_splits(b: int, hkv: int, max_ctx: int, sms: int, block_n: int) -> int:
    """Split count from shapes only: about four programs per SM, at least 4 tiles a split
    (1 when there are fewer than 32 (sequence, KV head) pairs: latency-bound)."""
    progs = max(1, b * hkv)
    want = max(1, math.ceil(4 * sms / progs))
    cap = max(1, math.ceil(max_ctx / ((1 if progs < 32 else 4) * block_n)))
    return min(want, cap, 64)


def decode_into(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_scale: torch.Tensor | None,
    k_scale: torch.Tensor | None,
    v_scale: torch.Tensor | None,
    scale: float | None,
    out: torch.Tensor,
    out_kind: int,
    out_strides: tuple[int, int],
    out_scale: torch.Tensor | None = None,
    sf: torch.Tensor | None = None,
    block_tables: torch.Tensor | None = None,
    seq_lens: torch.Tensor | None = None,
    splits: int | None = None,
    block_n: int | None = None,
    num_warps: int = 4,
    num_stages: int | None = None,
    prefetch: bool | None = None,
    fp16_dot: bool = True,
) -> None:
    """Launches split-KV decode attention into ``out`` (and ``sf`` for NVFP4).

    Args:
        q: ``[B, Hq, D]`` view (strides any, D contiguous).
        k, v: paged: the cache's K and V views ``[num_blocks, block_size, Hkv, D]``; dense:
            ``[B, Hkv, Skv, D]``.
        q_scale, k_scale, v_scale: dequant scales (None for 16-bit inputs).
        scale: softmax scale (None: 1/sqrt(D)).
        out: output (wide / FP8 ``[..]`` with row strides ``out_strides`` = (b, h)) or the
            NVFP4 packed ``[B, Hq*D/2]`` tensor.
        out_kind: 0 wide, 1 FP8, 2 NVFP4.
        out_scale: FP8 dequant scale s_o or NVFP4 encode global scale g.
        sf: NVFP4 swizzled block scales.
        block_tables, seq_lens: paged mode (int32 ``[B, max_blocks]``, ``[B]``).
        splits, block_n, num_warps, num_stages, prefetch: overrides (benchmark sweeps);
            ``prefetch`` double-buffers the next KV tile in registers instead of relying on
            Triton's software pipelining; ``fp16_dot=False`` keeps bf16 dots for a bf16 q
            with an FP8 cache (the slower path, for comparison).
    """
    bsz, hq, d = q.shape
    paged = block_tables is not None
    if paged:
        hkv, page = k.shape[2], k.shape[1]
        max_ctx = block_tables.shape[1] * page
        skb, skt, skh = k.stride(0), k.stride(1), k.stride(2)
        svb, svt, svh = v.stride(0), v.stride(1), v.stride(2)
        sbt = block_tables.stride(0)
    else:
        hkv, max_ctx, page = k.shape[1], k.shape[2], 1
        skb, skh, skt = k.stride(0), k.stride(1), k.stride(2)
        svb, svh, svt = v.stride(0), v.stride(1), v.stride(2)
        sbt = 0
    if bsz * hq == 0:
        return
    g = hq // hkv
    if block_n is None:  # H200 sweep: wide tiles once the grid is several waves deep
        block_n = 128 if bsz * hkv >= 512 else 64
    if prefetch is None:  # tiny grids (latency-bound): register double-buffering won
        prefetch = bsz * hkv < 32
    if num_stages is None:
        num_stages = 1 if prefetch else 3
    gp = max(16, triton.next_power_of_2(g))
    dp = max(16, triton.next_power_of_2(d))
    if splits is None:
        splits = choose_splits(bsz, hkv, max_ctx, _sm_count(q.device), block_n)
    chunk = triton.cdiv(triton.cdiv(max(max_ctx, 1), splits), block_n) * block_n
    splits = max(1, triton.cdiv(max(max_ctx, 1), chunk))
    fp8 = torch.float8_e4m3fn
    if k.dtype == torch.float32:
        raise ValueError(
            "graphfuse::paged_decode_attention: a float32 KV cache is not supported by the "
            "Triton decode kernel (use 16-bit or FP8)"
        )
    # FP8 / fp16 KV: fp16 dots (a bf16 or fp32 q is rescaled per row by a power of two)
    dot_dt = torch.bfloat16 if k.dtype == torch.bfloat16 else torch.float16
    if fp16_dot is False and k.dtype == fp8 and q.dtype == torch.bfloat16:
        dot_dt = torch.bfloat16  # benchmark comparison: the plain bf16 path
    q_rescale = dot_dt == torch.float16 and q.dtype in (torch.bfloat16, torch.float32)
    sob, soh = out_strides
    nv_k, nv_kbpad = d, 4
    if out_kind == 2:
        nv_k = out.shape[1] * 2
        nv_kbpad = sf.shape[1]
        zero_scale_padding(sf, out.shape[0], nv_k // 16)
    sm_scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    dummy = q
    split_out = splits > 1
    if split_out:
        po = torch.empty((bsz, hq, splits, dp), dtype=torch.float32, device=q.device)
        pml = torch.empty((bsz, hq, splits, 2), dtype=torch.float32, device=q.device)
    else:
        po = pml = dummy
    _decode_split[(bsz, hkv, splits)](
        q,
        k,
        v,
        q_scale if q_scale is not None else dummy,
        k_scale if k_scale is not None else dummy,
        v_scale if v_scale is not None else dummy,
        block_tables if paged else dummy,
        seq_lens if paged else dummy,
        out_scale if out_scale is not None else dummy,
        out,
        sf.view(torch.uint8) if sf is not None else out,
        po,
        pml,
        q.stride(0),
        q.stride(1),
        skb,
        skh,
        skt,
        svb,
        svh,
        svt,
        sbt,
        page,
        g,
        max_ctx,
        d,
        sm_scale,
        chunk,
        sob,
        soh,
        nv_k,
        nv_kbpad,
        HAS_QS=q_scale is not None,
        HAS_KS=k_scale is not None,
        HAS_VS=v_scale is not None,
        PAGED=paged,
        SPLIT_OUT=split_out,
        OUT_KIND=out_kind,
        DOT_DT=TL_DTYPE[dot_dt],
        Q_RESCALE=q_rescale,
        GP=gp,
        BLOCK_N=block_n,
        DP=dp,
        PREFETCH=prefetch,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    if split_out:
        rh = 4
        _decode_merge[(triton.cdiv(bsz * hq, rh),)](
            po,
            pml,
            v_scale if v_scale is not None else dummy,
            out_scale if out_scale is not None else dummy,
            out,
            sf.view(torch.uint8) if sf is not None else out,
            bsz * hq,
            hq,
            d,
            sob,
            soh,
            nv_k,
            nv_kbpad,
            NSPLIT=splits,
            SP=max(2, triton.next_power_of_2(splits)),
            HAS_VS=v_scale is not None,
            OUT_KIND=out_kind,
            RH=rh,
            DP=dp,
            num_warps=4,
        )
