"""Launcher of the split-KV decode attention kernels (``decode_kernels.py``): one query token
per sequence, paged or dense KV, output in 16 bits, FP8 or NVFP4.

Two kernels: ``head`` (grid ``(B, Hkv, splits)``; a program takes the query heads of one KV
head) and, for paged KV, ``seq`` (grid ``(B, splits)``; a program takes all heads of a
sequence and reads whole cache blocks). FP8 K/V tiles are upcast to fp16 in registers
(exact); the dequant scales fold into the logit scale and the output. With several splits a
merge kernel combines the partials and then quantizes. Split counts and tile shapes depend
on shapes only (no host sync), so every launch is CUDA-graph capturable.
"""

from __future__ import annotations

import math

import torch
import triton

from graphfuse.ops.quant_ref import round_up

from ._common import TL_DTYPE, zero_scale_padding
from .decode_kernels import decode_head, decode_merge, decode_seq

_SM_COUNT: dict[int, int] = {}


def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":  # the Triton CPU interpreter (development only)
        return 132
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _SM_COUNT:
        _SM_COUNT[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _SM_COUNT[idx]


def choose_splits(b: int, hkv: int, max_ctx: int, sms: int, block_n: int) -> int:
    """Head kernel split count from shapes only: about four programs per SM, at least 4
    tiles a split (1 when there are fewer than 32 (sequence, KV head) pairs:
    latency-bound)."""
    progs = max(1, b * hkv)
    want = max(1, math.ceil(4 * sms / progs))
    cap = max(1, math.ceil(max_ctx / ((1 if progs < 32 else 4) * block_n)))
    return min(want, cap, 64)


def choose_splits_seq(b: int, max_ctx: int, sms: int, block_t: int) -> int:
    """Seq kernel split count: about two programs per SM, at least 4 tiles a split (1 tile
    below 32 sequences), at most 64."""
    want = max(1, math.ceil(2 * sms / max(1, b)))
    cap = max(1, math.ceil(max_ctx / ((1 if b < 32 else 4) * block_t)))
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
    kernel: str = "head",
    splits: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    prefetch: bool | None = None,
    trans: bool = False,
    bt_ahead: bool = False,
    head_major: bool = False,
    one_page: bool | None = None,
    sf_pad: bool = True,
) -> None:
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
        kernel: ``"head"`` or ``"seq"`` (paged only; all KV heads of a cache block per
            program).
        splits, block_n, num_warps, num_stages: overrides (None: from shapes); ``block_n``
            is the tile's token count for either kernel.
        prefetch: double-buffer the next KV tile in registers instead of relying on
            Triton's software pipelining (None: for grids under 32 programs).
        trans: compute ``Sᵀ = K·qᵀ`` (the KV tile as the MMA's M side).
        bt_ahead: read block-table entries one tile ahead of the KV loads. Without it
            Triton's software pipeliner spends a stage on the table load and gives the
            K/V tiles one shared-memory buffer whatever ``num_stages`` is (loads never
            overlap the dots); with it K/V get ``num_stages - 1`` buffers (sm_90 TTGIR).
        head_major: head kernel grid ``(Hkv, B, splits)``.
        one_page: one block-table read per tile (tiles inside one cache block; None: on
            for the seq kernel when the block size allows).
        sf_pad: zero the NVFP4 scale padding rows inside the kernel (else a memset first).
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
    if kernel not in ("head", "seq") or (kernel == "seq" and not paged):
        raise ValueError(f"decode kernel {kernel!r} (paged={paged}) is not available")
    g = hq // hkv
    seq = kernel == "seq"
    if block_n is None:  # H200 sweep: wide tiles once the grid is several waves deep
        block_n = 16 if seq else (128 if bsz * hkv >= 512 else 64)
    if prefetch is None:  # tiny grids (latency-bound): register double-buffering won
        prefetch = (bsz if seq else bsz * hkv) < 32
    if num_stages is None:
        num_stages = 1 if prefetch else 3
    if num_warps is None:
        num_warps = 8 if seq else 4
    if one_page is None:
        one_page = seq
    one_page = bool(one_page and paged and page % block_n == 0)
    dp = max(16, triton.next_power_of_2(d))
    if splits is None:
        sms = _sm_count(q.device)
        if seq:
            splits = choose_splits_seq(bsz, max_ctx, sms, block_n)
        else:
            splits = choose_splits(bsz, hkv, max_ctx, sms, block_n)
    chunk = triton.cdiv(triton.cdiv(max(max_ctx, 1), splits), block_n) * block_n
    splits = max(1, triton.cdiv(max(max_ctx, 1), chunk))
    if k.dtype == torch.float32:
        raise ValueError(
            "graphfuse::paged_decode_attention: a float32 KV cache is not supported by the "
            "Triton decode kernel (use 16-bit or FP8)"
        )
    # FP8 / fp16 KV: fp16 dots (a bf16 or fp32 q is rescaled per row by a power of two)
    dot_dt = torch.bfloat16 if k.dtype == torch.bfloat16 else torch.float16
    q_rescale = dot_dt == torch.float16 and q.dtype in (torch.bfloat16, torch.float32)
    sob, soh = out_strides
    nv_m, nv_k, nv_kbpad = 1, d, 4
    pad_in_kernel = False
    if out_kind == 2:
        nv_m, nv_k, nv_kbpad = out.shape[0], out.shape[1] * 2, sf.shape[1]
        # in-kernel zeroing covers padding rows only; padding columns need the memset
        pad_in_kernel = (
            sf_pad
            and nv_kbpad == nv_k // 16
            and sf.shape[0] == round_up(max(nv_m, 1), 128)
            and sf.data_ptr() % 4 == 0  # zeroed in 32-bit words
        )
        if not pad_in_kernel:
            zero_scale_padding(sf, nv_m, nv_k // 16)
    sm_scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    dummy = q
    split_out = splits > 1
    if split_out:
        po = torch.empty((bsz, hq, splits, dp), dtype=torch.float32, device=q.device)
        pml = torch.empty((bsz, hq, splits, 2), dtype=torch.float32, device=q.device)
    else:
        po = pml = dummy
    sf_u8 = sf.view(torch.uint8) if sf is not None else out
    vs_arg = v_scale if v_scale is not None else dummy
    osc_arg = out_scale if out_scale is not None else dummy
    common = (
        q,
        k,
        v,
        q_scale if q_scale is not None else dummy,
        k_scale if k_scale is not None else dummy,
        vs_arg,
        block_tables if paged else dummy,
        seq_lens if paged else dummy,
        osc_arg,
        out,
        sf_u8,
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
        hq,
    )
    flags = dict(
        HAS_QS=q_scale is not None,
        HAS_KS=k_scale is not None,
        HAS_VS=v_scale is not None,
        SPLIT_OUT=split_out,
        OUT_KIND=out_kind,
        DOT_DT=TL_DTYPE[dot_dt],
        Q_RESCALE=q_rescale,
        DP=dp,
        PREFETCH=prefetch,
        TRANS=trans,
        BT_AHEAD=bt_ahead,
        ONE_PAGE=one_page,
        SF_PAD=pad_in_kernel,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    tail = (sm_scale, chunk, sob, soh, nv_m, nv_k, nv_kbpad)
    if seq:
        decode_seq[(bsz, splits)](
            *common,
            hkv,
            g,
            d,
            *tail,
            HQP=max(16, triton.next_power_of_2(hq)),
            HKVP=triton.next_power_of_2(hkv),
            BLOCK_T=block_n,
            **flags,
        )
    else:
        grid = (hkv, bsz, splits) if head_major else (bsz, hkv, splits)
        decode_head[grid](
            *common,
            g,
            max_ctx,
            d,
            *tail,
            PAGED=paged,
            GP=max(16, triton.next_power_of_2(g)),
            BLOCK_N=block_n,
            HEAD_MAJOR=head_major,
            **flags,
        )
    if split_out:
        rh = 4
        decode_merge[(triton.cdiv(bsz * hq, rh),)](
            po,
            pml,
            vs_arg,
            osc_arg,
            out,
            sf_u8,
            bsz * hq,
            hq,
            d,
            sob,
            soh,
            nv_m,
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
