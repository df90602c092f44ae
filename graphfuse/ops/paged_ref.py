"""Pure-PyTorch references of the paged decode-attention ops (the definition kernels are
tested against): gather each sequence's tokens through its block table, dequantize, attend in
fp32 (one query token per sequence, all ``seq_lens[b]`` cached tokens, no causal mask), then
apply the docs/numerics.md quantizer.

Example:
    >>> cache = torch.randn(8, 2, 16, 2, 64)            # 8 blocks of 16 tokens, 2 KV heads
    >>> tables = torch.tensor([[3, 1], [0, 5]], dtype=torch.int32)
    >>> lens = torch.tensor([20, 7], dtype=torch.int32)
    >>> out = paged_decode_fp32(torch.randn(2, 8, 64), cache, tables, lens)  # [2, 8, 64]
"""

from __future__ import annotations

import torch

from ._checks import check_nvfp4_head_dim, check_wide_out
from ._fake_paged import check_paged_args
from .attention_ref import attention_fp32

__all__ = [
    "paged_decode_fp32",
    "paged_decode_attention_ref",
    "paged_decode_attention_fp8_ref",
    "paged_decode_attention_nvfp4_ref",
]


def gather_kv(
    kv_cache: torch.Tensor, block_tables: torch.Tensor, seq_lens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Dense K, V ``[B, Hkv, max_ctx, D]`` (cache dtype) and the bool keep mask
    ``[B, 1, 1, max_ctx]`` (token index < seq_lens[b]); table entries past a sequence's
    length are never dereferenced (clamped, then masked)."""
    nb, _, bs, hkv, d = kv_cache.shape
    b, mb = block_tables.shape
    pos = torch.arange(mb * bs, device=kv_cache.device)
    keep = pos.unsqueeze(0) < seq_lens.to(torch.int64).unsqueeze(1)  # [B, ctx]
    blk = block_tables.to(torch.int64).repeat_interleave(bs, dim=1)  # [B, ctx]
    blk = torch.where(keep, blk, torch.zeros_like(blk)).clamp(0, max(nb - 1, 0))
    slot = (pos % bs).unsqueeze(0).expand(b, -1)
    kv = kv_cache[blk, :, slot]  # [B, ctx, 2, Hkv, D]
    k = kv[:, :, 0].permute(0, 2, 1, 3)
    v = kv[:, :, 1].permute(0, 2, 1, 3)
    return k, v, keep[:, None, None, :]


def paged_decode_fp32(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    q_scale: torch.Tensor | None = None,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """The wide (fp32) paged decode-attention output ``[B, Hq, D]``.

    Args:
        q: ``[B, Hq, D]`` (16/32-bit, or FP8 with ``q_scale``).
        kv_cache: ``[num_blocks, 2, block_size, Hkv, D]`` (16/32-bit, or FP8 with scales).
        block_tables: int32 ``[B, max_blocks]``; entry j of row b is the cache block holding
            tokens ``j*block_size ..`` of sequence b.
        seq_lens: int32 ``[B]``: tokens attended per sequence (0 gives a zero row).
        q_scale, k_scale, v_scale: dequant scales (required for FP8; multiply others).
        scale: softmax scale (None: ``1/sqrt(D)``).

    Returns:
        fp32 ``[B, Hq, D]``.
    """
    check_paged_args(
        "paged_decode_attention", q, kv_cache, block_tables, seq_lens, q_scale, k_scale, v_scale
    )
    b, hq, d = q.shape
    if b == 0 or block_tables.shape[1] * kv_cache.shape[2] == 0:
        return q.new_zeros((b, hq, d), dtype=torch.float32)
    k, v, keep = gather_kv(kv_cache, block_tables, seq_lens)
    out = attention_fp32(
        q.unsqueeze(2), k, v, q_scale, k_scale, v_scale, keep, "none", scale, "bhsd", "default"
    )
    return out.squeeze(2)


def paged_decode_attention_ref(
    q, kv_cache, block_tables, seq_lens, q_scale, k_scale, v_scale, scale, out_dtype
) -> torch.Tensor:
    """Reference of ``graphfuse::paged_decode_attention``: the fp32 output rounded once."""
    check_wide_out("paged_decode_attention", out_dtype)
    wide = paged_decode_fp32(q, kv_cache, block_tables, seq_lens, q_scale, k_scale, v_scale, scale)
    return wide.to(out_dtype)


def paged_decode_attention_fp8_ref(
    q, kv_cache, block_tables, seq_lens, q_scale, k_scale, v_scale, scale, out_scale
) -> torch.Tensor:
    """Reference of ``graphfuse::paged_decode_attention_fp8``: FP8 static quant (dequant
    scale ``out_scale``) of the fp32 output, ``[B, Hq, D]``."""
    from .quant_ref import fp8_static_quant_ref

    wide = paged_decode_fp32(q, kv_cache, block_tables, seq_lens, q_scale, k_scale, v_scale, scale)
    return fp8_static_quant_ref(wide, out_scale)


def paged_decode_attention_nvfp4_ref(
    q, kv_cache, block_tables, seq_lens, q_scale, k_scale, v_scale, scale, out_global_scale
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference of ``graphfuse::paged_decode_attention_nvfp4``: NVFP4 quant (encode global
    scale ``out_global_scale``, swizzled block scales) of the fp32 output viewed
    ``[B, Hq*D]``."""
    from .quant_ref import nvfp4_quant_ref

    b, hq, d = q.shape
    check_nvfp4_head_dim("paged_decode_attention_nvfp4", d)
    wide = paged_decode_fp32(q, kv_cache, block_tables, seq_lens, q_scale, k_scale, v_scale, scale)
    return nvfp4_quant_ref(wide.reshape(b, hq * d), out_global_scale, swizzle=True)
