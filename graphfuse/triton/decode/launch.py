"""Launcher of the split-KV decode kernels: ``decode_into``."""

from __future__ import annotations

import math

import torch
import triton

from graphfuse.ops.quant_ref import round_up

from ..host import (
    TL_DTYPE,
    dependent_launch,
    has_pdl,
    sf_pad_programs,
    sm_count,
    zero_scale_padding,
)
from .config import choose_splits, decode_config
from .kernels import decode_kernel, decode_merge

# 32-bit words of NVFP4 scale padding a merge program zeroes (at most): 8 programs at
# Hq * D = 4096
MERGE_PAD_WORDS = 1024


def merge_launch(splits: int) -> tuple[int, int]:
    """``(num_warps, splits a step)`` of the merge, whose programs take one (sequence, head)
    row each (a few sequences' merges spread over as many programs as rows). Under 16
    splits: one warp reading up to 8 splits a step, so the sum over splits stays within each
    thread; from 16: 4 warps reading 32 a step (docs/gpu.md, "Decode: the split merge", has
    the measurements).

    Example:
        >>> merge_launch(4), merge_launch(33)
        ((1, 4), (4, 32))
    """
    if splits >= 16:
        return 4, 32
    return 1, min(triton.next_power_of_2(splits), 8)


def decode_into(
    q, k, v, q_scale, k_scale, v_scale, scale, out: torch.Tensor, out_kind: int,
    out_strides: tuple[int, int], out_scale=None, sf=None, block_tables=None, seq_lens=None,
    config: dict | None = None,
) -> None:  # fmt: skip
    """Launches split-KV decode attention into ``out`` (and ``sf`` for NVFP4).

    Args:
        q: ``[B, Hq, D]`` view (strides any, D contiguous).
        k, v: paged: the cache's K and V views ``[num_blocks, block_size, Hkv, D]``; dense:
            ``[B, Hkv, Skv, D]``.
        q_scale, k_scale, v_scale: dequant scales (None for 16-bit inputs).
        scale: softmax scale (None: 1/sqrt(D)).
        out: output (wide / FP8 ``[..]`` with row strides ``out_strides`` = (b, h)) or the
            NVFP4 packed ``[M, Hq*D/2]`` tensor.
        out_kind: 0 wide, 1 FP8, 2 NVFP4.
        out_scale: FP8 dequant scale s_o or NVFP4 encode global scale g.
        sf: NVFP4 swizzled block scales.
        block_tables, seq_lens: paged mode (int32 ``[B, max_blocks]``, ``[B]``).
        config: overrides of ``config.decode_config``'s knobs (tests, benchmark sweeps).
    """
    bsz, hq, d = q.shape
    paged = block_tables is not None
    if paged:
        hkv, page = k.shape[2], k.shape[1]
        max_ctx = block_tables.shape[1] * page
        skb, skt, skh = k.stride(0), k.stride(1), k.stride(2)
        svb, svt, svh = v.stride(0), v.stride(1), v.stride(2)
    else:
        hkv, max_ctx, page = k.shape[1], k.shape[2], 1
        skb, skh, skt = k.stride(0), k.stride(1), k.stride(2)
        svb, svh, svt = v.stride(0), v.stride(1), v.stride(2)
    cfg = decode_config(paged, bsz, hkv, max_ctx, config, k.element_size())
    if bsz * hq == 0:
        return
    if k.dtype == torch.float32:
        raise ValueError(
            "graphfuse::paged_decode_attention: a float32 KV cache is not supported by the "
            "Triton decode kernel (use 16-bit or FP8)"
        )
    block_n = cfg["block_n"]
    splits = cfg["splits"]
    if splits is None:
        splits = choose_splits(bsz, hkv, max_ctx, sm_count(q.device), block_n)
    chunk = triton.cdiv(triton.cdiv(max(max_ctx, 1), splits), block_n) * block_n
    splits = max(1, triton.cdiv(max(max_ctx, 1), chunk))
    dp = max(16, triton.next_power_of_2(d))
    # FP8 / fp16 KV: fp16 dots (a bf16 or fp32 q is rescaled per row by a power of two)
    dot_dt = torch.bfloat16 if k.dtype == torch.bfloat16 else torch.float16
    q_rescale = dot_dt == torch.float16 and q.dtype in (torch.bfloat16, torch.float32)
    sob, soh = out_strides
    nv_m, nv_k, nv_kbpad = 1, d, 4
    pad_in_kernel = False
    if out_kind == 2:
        nv_m, nv_k, nv_kbpad = out.shape[0], out.shape[1] * 2, sf.shape[1]
        # the kernel zeroes padding rows (in 32-bit words); padding columns need the memset
        pad_in_kernel = (
            nv_kbpad == nv_k // 16
            and sf.shape[0] == round_up(max(nv_m, 1), 128)
            and sf.data_ptr() % 4 == 0
        )
        if not pad_in_kernel:
            zero_scale_padding(sf, nv_m, nv_k // 16)
    sm_scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    split_out = splits > 1
    pdl = cfg["pdl"] and has_pdl(q.device)
    if split_out:
        po = torch.empty((bsz, hq, splits, dp), dtype=torch.float32, device=q.device)
        pml = torch.empty((bsz, hq, splits, 2), dtype=torch.float32, device=q.device)
    else:
        po = pml = q
    sf_u8 = sf.view(torch.uint8) if sf is not None else out
    vs_arg = v_scale if v_scale is not None else q
    osc_arg = out_scale if out_scale is not None else q
    g = hq // hkv
    grid = (hkv, bsz, splits) if cfg["head_major"] else (bsz, hkv, splits)
    decode_kernel[grid](
        q, k, v, q_scale if q_scale is not None else q, k_scale if k_scale is not None else q,
        vs_arg, block_tables if paged else q, seq_lens if paged else q, osc_arg, out, sf_u8,
        po, pml, q.stride(0), q.stride(1), skb, skh, skt, svb, svh, svt,
        block_tables.stride(0) if paged else 0, page, hq, g, max_ctx, d, sm_scale, chunk,
        sob, soh, nv_m, nv_k, nv_kbpad,
        HAS_QS=q_scale is not None, HAS_KS=k_scale is not None, HAS_VS=v_scale is not None,
        PAGED=paged, SPLIT_OUT=split_out, OUT_KIND=out_kind, DOT_DT=TL_DTYPE[dot_dt],
        Q_RESCALE=q_rescale, GP=max(16, triton.next_power_of_2(g)), BLOCK_N=block_n, DP=dp,
        PREFETCH=cfg["prefetch"], BT_AHEAD=cfg["bt_ahead"], HEAD_MAJOR=cfg["head_major"],
        SF_PAD=pad_in_kernel and not split_out, num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"], **dependent_launch(pdl),
    )  # fmt: skip
    if split_out:
        warps, sc = merge_launch(splits)
        pad_programs = sf_pad_programs(nv_m, nv_kbpad, MERGE_PAD_WORDS) if pad_in_kernel else 0
        decode_merge[(bsz * hq + pad_programs,)](
            po, pml, vs_arg, osc_arg, out, sf_u8, bsz * hq, hq, splits, d, sob, soh, nv_m,
            nv_k, nv_kbpad, HAS_VS=v_scale is not None, OUT_KIND=out_kind, SC=sc, DP=dp,
            SF_PAD=pad_programs > 0, num_warps=warps,
            **dependent_launch(pdl),
        )  # fmt: skip
