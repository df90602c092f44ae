"""Triton fused attention (prefill; any Sq) with 16-bit / FP8 / NVFP4 output epilogues.

One program computes ``BLOCK_M`` query rows of one (batch, q head) with an online softmax
over ``BLOCK_N``-key tiles (FlashAttention-2 order, exp2 with the scales folded in).
FP8 q and k multiply on the FP8 tensor cores (K tile loaded as ``[D, N]``: K-major, what FP8
wgmma wants). P·V: ``precision="default"`` rounds P to fp16 (bf16 for bf16 v) and upcasts an
FP8 V tile in registers (e4m3 -> fp16 is exact); ``"fast"`` with FP8 v rounds ``256 * P`` to
e4m3 and multiplies on the FP8 tensor cores, which read V K-major: a V stored ``[.., S, D]``
is copied K-major once per call first (``transpose.k_major``). Causal masks split
the key loop into unmasked tiles and the diagonal tiles, which alone pay for the mask.
16-bit prefill calls that ``attention_config.ws_eligible`` accepts run the warp-specialised
Gluon kernel of ``attention_ws.py`` instead on sm_90 devices (the rule is written down
above ``attention_config.TILE_KNOBS``).
One design ships: FlashAttention-2 rescaling on every key tile, row sums of the exact P,
query row blocks launched heaviest-causal-first (grid ``(B*H, M blocks)``), and the
``store_attention_acc`` epilogue; ``attention_config.default_config`` chooses only the tile
shape (a table per dtype / head dim). The variants that lost on the H200 (LAZY, FAST_L, L_MMA,
REV_M, EPI 0/1/3, V16) were removed on 2026-12-04; docs/gpu.md keeps their measurements.
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

from ._common import TL_DTYPE, store_attention_acc, zero_scale_padding
from .attention_config import (
    TILE_KNOBS,
    default_config,
    dot_dtypes,
    mask_args,
    nvfp4_row_strides,
    out_strides,
    ws_eligible,
)
from .transpose import k_major


@triton.jit
def _tile(
    q,
    acc,
    m_i,
    l_i,
    k_ptrs,
    v_ptrs,
    mask_ptrs,
    lo,
    hi,
    sks,
    svs,
    smn,
    offs_m,
    offs_n,
    offs_d,
    D,
    SQ,
    SKV,
    qk_scale,
    causal_off,
    BOUNDS: tl.constexpr,
    CAUSAL: tl.constexpr,
    MASK_KIND: tl.constexpr,
    QK_DT: tl.constexpr,
    PV_DT: tl.constexpr,
    FAST: tl.constexpr,
    EVEN_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
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
def _attn_fwd(
    Q,
    K,
    V,
    QS,
    KS,
    VS,
    MASK,
    OSC,
    OUT,
    SF,
    sqb,
    sqh,
    sqs,
    sqd,
    skb,
    skh,
    sks,
    skd,
    svb,
    svh,
    svs,
    svd,
    smb,
    smh,
    sms,
    smn,
    sob,
    soh,
    sos,
    H,
    G,
    SQ,
    SKV,
    D,
    sm_scale,
    causal_off,
    NV_K,
    NV_KBPAD,
    nmb,
    nmh,
    nms,
    nch,
    HAS_QS: tl.constexpr,
    HAS_KS: tl.constexpr,
    HAS_VS: tl.constexpr,
    MASK_KIND: tl.constexpr,
    CAUSAL: tl.constexpr,
    OUT_KIND: tl.constexpr,
    FAST: tl.constexpr,
    QK_DT: tl.constexpr,
    PV_DT: tl.constexpr,
    EVEN_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DP: tl.constexpr,
):
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
        acc, m_i, l_i = _tile(
            q,
            acc,
            m_i,
            l_i,
            k_ptrs,
            v_ptrs,
            mask_ptrs,
            lo,
            hi_s,
            sks,
            svs,
            smn,
            offs_m,
            offs_n,
            offs_d,
            D,
            SQ,
            SKV,
            qk_scale,
            causal_off,
            stage == 1,
            CAUSAL,
            MASK_KIND,
            QK_DT,
            PV_DT,
            FAST,
            EVEN_D,
            BLOCK_N,
        )
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


@functools.cache
def _gluon_hopper(device: torch.device) -> bool:
    """An sm_90 device and a Triton with Gluon's Hopper layer (``attention_ws.py``)."""
    if torch.cuda.get_device_capability(device) != (9, 0):
        return False
    try:
        from . import attention_ws  # noqa: F401
    except (ImportError, AttributeError):  # no Gluon, or an older Gluon API
        return False
    return True


def attention_into(
    q,
    k,
    v,
    q_scale,
    k_scale,
    v_scale,
    attn_mask,
    causal,
    scale,
    layout,
    precision,
    out: torch.Tensor,
    out_kind: int,
    out_scale: torch.Tensor | None = None,
    sf: torch.Tensor | None = None,
    config: dict | None = None,
) -> None:
    """Launches the fused attention writing into ``out`` (and ``sf`` for NVFP4).

    Args:
        q, k, v, ...: the op's arguments (already validated by the caller).
        out: the output (layout shape; fp8 / wide dtype) or NVFP4 packed ``[M, K/2]``.
        out_kind: 0 wide, 1 FP8, 2 NVFP4.
        out_scale: FP8 dequant scale s_o or NVFP4 encode global scale g.
        sf: NVFP4 swizzled block scales (float8_e4m3fn), padding zeroed here.
        config: overrides of ``default_config``'s knobs (benchmark sweeps).
    """
    b, h, sq, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    if b * h * sq == 0:
        return
    qk_dt, pv_dt, fast = dot_dtypes(q, k, v, precision)
    dp = max(16, triton.next_power_of_2(d))
    mask_kind, mask, mstr = mask_args(attn_mask, b, h, sq, skv, q)
    cfg = default_config(qk_dt, dp, sq, out_kind=out_kind, mask_kind=mask_kind)
    cfg.update(config or {})
    if (
        cfg.pop("WS")
        and ws_eligible(q, k, v, attn_mask, out, out_kind, precision, True)
        and _gluon_hopper(q.device)
    ):
        from .attention_ws import attention_ws_into

        attention_ws_into(
            q, k, v, q_scale, k_scale, v_scale, causal, scale, layout, out, out_kind, out_scale, sf
        )
        return
    if fast and v.dtype == torch.float8_e4m3fn and sq > 16 and v.stride(-2) != 1:
        v = k_major(v)  # K-major FP8 V for the FP8 P·V (attention_config's comment)
    unknown = set(cfg) - set(TILE_KNOBS)
    if unknown:
        raise ValueError(f"unknown prefill config keys {sorted(unknown)}: knobs are {TILE_KNOBS}")
    sob, soh, sos = out_strides(layout, b, h, sq, d)
    nmb, nmh, nms, nch = nvfp4_row_strides(layout, h, sq, d)
    nv_k, nv_kbpad = d, 4
    if out_kind == 2:
        nv_k = out.shape[1] * 2
        nv_kbpad = sf.shape[1]
        zero_scale_padding(sf, out.shape[0], nv_k // 16)
    sm_scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    causal_off = 0 if causal != "bottom_right" else skv - sq
    nm = triton.cdiv(sq, cfg["BLOCK_M"])
    grid = (b * h, nm)
    _attn_fwd[grid](
        q,
        k,
        v,
        q_scale if q_scale is not None else q,
        k_scale if k_scale is not None else q,
        v_scale if v_scale is not None else q,
        mask,
        out_scale if out_scale is not None else q,
        out,
        sf.view(torch.uint8) if sf is not None else out,
        *q.stride(),
        *k.stride(),
        *v.stride(),
        *mstr,
        sob,
        soh,
        sos,
        h,
        h // hkv,
        sq,
        skv,
        d,
        sm_scale,
        causal_off,
        nv_k,
        nv_kbpad,
        nmb,
        nmh,
        nms,
        nch,
        HAS_QS=q_scale is not None,
        HAS_KS=k_scale is not None,
        HAS_VS=v_scale is not None,
        MASK_KIND=mask_kind,
        CAUSAL=causal != "none",
        OUT_KIND=out_kind,
        FAST=fast,
        QK_DT=TL_DTYPE[qk_dt],
        PV_DT=TL_DTYPE[pv_dt],
        EVEN_D=dp == d,
        DP=dp,
        **cfg,
    )
