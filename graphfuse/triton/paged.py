"""CUDA impls of the paged decode-attention ops (``graphfuse::paged_decode_attention``,
``_fp8``, ``_nvfp4``) over the split-KV decode kernel in ``decode.py``; semantics in
``docs/gpu.md``."""

from __future__ import annotations

import torch

from .decode import decode_into


def paged_config(b: int, hq: int, hkv: int, max_ctx: int, d: int, block_size: int) -> dict:
    """The decode kernel configuration for a paged shape (shapes only, so CUDA graphs see
    one launch per shape): the knobs of :func:`decode_into` (``kernel``, ``block_n``,
    ``splits``, ``num_warps``, ``num_stages``, ``prefetch``, ``trans``, ``bt_ahead``, ...);
    knobs left out take ``decode_into``'s shape-based defaults.

    Set from a decode configuration sweep on an H200 (2026-12-03; docs/gpu.md, in git history):
    every row reads the block table one tile ahead (``bt_ahead``) so Triton's pipeliner
    keeps 2+ K/V tiles in flight.

    Example:
        >>> paged_config(64, 32, 8, 4096, 128, 16)["block_n"]
        128
    """
    programs = b * hkv
    if programs >= 256 and max_ctx >= 2048:  # long contexts, full grid: 1 split, wide tiles
        return dict(_LONG)
    if programs >= 256:  # B=128 ctx 1k: the shape-based default measured best
        return {"kernel": "head"}
    if programs > 8:  # B ~ 8: one tile-ahead table read, KV head fastest in the grid
        return dict(_SMALL)
    return dict(_TINY)  # B = 1: register double-buffering, 8 warps


_LONG = {"kernel": "head", "block_n": 128, "num_warps": 4, "num_stages": 3, "bt_ahead": True,
         "prefetch": False, "splits": 1}  # fmt: skip
_SMALL = {"kernel": "head", "block_n": 64, "num_warps": 4, "num_stages": 3, "bt_ahead": True,
          "prefetch": False, "head_major": True}  # fmt: skip
_TINY = {"kernel": "head", "block_n": 64, "num_warps": 8, "num_stages": 1, "bt_ahead": True,
         "prefetch": True}  # fmt: skip


def paged_into(
    q,
    kv_cache,
    block_tables,
    seq_lens,
    q_scale,
    k_scale,
    v_scale,
    scale,
    out,
    out_kind,
    out_scale=None,
    sf=None,
    **overrides,
) -> None:
    """Launches paged decode attention into ``out`` (``[B, Hq, D]``, or NVFP4 packed
    ``[B, Hq*D/2]`` with ``sf``) with :func:`paged_config`'s configuration; ``overrides``
    (the knobs of :func:`decode_into`) replace its entries."""
    b, hq, d = q.shape
    k = kv_cache[:, 0]
    v = kv_cache[:, 1]
    cfg = paged_config(b, hq, k.shape[2], block_tables.shape[1] * k.shape[1], d, k.shape[1])
    cfg.update(overrides)
    decode_into(
        q,
        k,
        v,
        q_scale,
        k_scale,
        v_scale,
        scale,
        out,
        out_kind,
        (hq * d, d),
        out_scale,
        sf,
        block_tables=block_tables,
        seq_lens=seq_lens,
        **cfg,
    )


def _check(op, q, kv_cache, block_tables, seq_lens, q_scale, k_scale, v_scale) -> None:
    from graphfuse.ops._fake_paged import check_paged_args

    check_paged_args(op, q, kv_cache, block_tables, seq_lens, q_scale, k_scale, v_scale)
    if q.shape[-1] > 256 or q.stride(-1) != 1 or kv_cache.stride(-1) != 1:
        raise RuntimeError(
            f"graphfuse::{op}: the Triton kernel needs head_dim <= 256 and "
            f"contiguous head_dim, got D={q.shape[-1]}, strides {q.stride()}, "
            f"{kv_cache.stride()}"
        )


def paged_decode_attention(
    q, kv_cache, block_tables, seq_lens, q_scale, k_scale, v_scale, scale, out_dtype
):
    """CUDA impl of ``graphfuse::paged_decode_attention``."""
    args = (q, kv_cache, block_tables, seq_lens, q_scale, k_scale, v_scale)
    _check("paged_decode_attention", *args)
    out = torch.empty(q.shape, dtype=out_dtype, device=q.device)
    paged_into(*args, scale, out, 0)
    return out


def paged_decode_attention_fp8(
    q, kv_cache, block_tables, seq_lens, q_scale, k_scale, v_scale, scale, out_scale
):
    """CUDA impl of ``graphfuse::paged_decode_attention_fp8``."""
    args = (q, kv_cache, block_tables, seq_lens, q_scale, k_scale, v_scale)
    _check("paged_decode_attention_fp8", *args)
    out = torch.empty(q.shape, dtype=torch.float8_e4m3fn, device=q.device)
    paged_into(*args, scale, out, 1, out_scale)
    return out


def paged_decode_attention_nvfp4(
    q, kv_cache, block_tables, seq_lens, q_scale, k_scale, v_scale, scale, out_global_scale
):
    """CUDA impl of ``graphfuse::paged_decode_attention_nvfp4``."""
    from graphfuse.ops._fake_paged import nvfp4_out_shapes

    args = (q, kv_cache, block_tables, seq_lens, q_scale, k_scale, v_scale)
    _check("paged_decode_attention_nvfp4", *args)
    if q.shape[2] % 16:
        raise RuntimeError(
            "graphfuse::paged_decode_attention_nvfp4: NVFP4 output needs "
            f"D % 16 == 0, got D={q.shape[2]}"
        )
    pshape, sshape = nvfp4_out_shapes(*q.shape)
    packed = torch.empty(pshape, dtype=torch.uint8, device=q.device)
    sf = torch.empty(sshape, dtype=torch.float8_e4m3fn, device=q.device)
    paged_into(*args, scale, packed, 2, out_global_scale, sf)
    return packed, sf
