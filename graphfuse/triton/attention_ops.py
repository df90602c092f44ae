"""CUDA impls of the fused attention ops (``graphfuse::attention``, ``_fp8``, ``_nvfp4``):
argument checks, output allocation, and the choice between the prefill kernel
(``attention.py``) and the split-KV decode kernel (``decode.py``) for Sq == 1."""

from __future__ import annotations

import torch

from .attention import attention_into, out_strides


def _route_decode(q, attn_mask, causal) -> bool:
    """Sq == 1 without an explicit mask goes to the split-KV decode kernel (``top_left``
    with Sq == 1 keeps key 0 only: a prefill-kernel case)."""
    return q.shape[2] == 1 and attn_mask is None and causal in ("none", "bottom_right")


def run(
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
    out,
    out_kind,
    out_scale=None,
    sf=None,
    config: dict | None = None,
) -> None:
    wide32 = k.dtype == torch.float32
    d_contig = q.stride(-1) == k.stride(-1) == v.stride(-1) == 1
    if _route_decode(q, attn_mask, causal) and not wide32 and d_contig:
        from .decode import decode_into

        b, h, _, d = q.shape
        sob, soh, _ = out_strides(layout, b, h, 1, d)
        decode_into(
            q[:, :, 0],
            k,
            v,
            q_scale,
            k_scale,
            v_scale,
            scale,
            out,
            out_kind,
            (sob, soh),
            out_scale,
            sf,
        )
    else:
        attention_into(
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
            out,
            out_kind,
            out_scale,
            sf,
            config,
        )


def _check(op, q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, layout, precision):
    from graphfuse.ops._attention_args import check_attention_args

    check_attention_args(
        op, q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, layout, precision
    )
    if q.shape[-1] > 256:
        raise RuntimeError(
            f"graphfuse::{op}: the Triton kernel supports head_dim <= 256, got {q.shape[-1]}"
        )


def attention(
    q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, scale, layout, precision, out_dtype
):
    """CUDA impl of ``graphfuse::attention``."""
    from graphfuse.ops._attention_args import out_shape

    args = (q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, layout, precision)
    _check("attention", *args)
    b, h, s, d = q.shape
    out = torch.empty(out_shape(layout, b, h, s, d), dtype=out_dtype, device=q.device)
    run(q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, scale, layout, precision, out, 0)
    return out


def attention_fp8(
    q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, scale, layout, precision, out_scale
):
    """CUDA impl of ``graphfuse::attention_fp8``."""
    from graphfuse.ops._attention_args import out_shape

    _check(
        "attention_fp8", q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, layout, precision
    )
    b, h, s, d = q.shape
    out = torch.empty(out_shape(layout, b, h, s, d), dtype=torch.float8_e4m3fn, device=q.device)
    run(
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
        out,
        1,
        out_scale,
    )
    return out


def attention_nvfp4(
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
    out_global_scale,
):
    """CUDA impl of ``graphfuse::attention_nvfp4``."""
    from graphfuse.ops._attention_args import check_nvfp4_head_dim, nvfp4_rows_cols

    _check(
        "attention_nvfp4", q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, layout, precision
    )
    b, h, s, d = q.shape
    check_nvfp4_head_dim("attention_nvfp4", d)
    m, kk = nvfp4_rows_cols(layout, b, h, s, d)
    packed = torch.empty((m, kk // 2), dtype=torch.uint8, device=q.device)
    sf = torch.empty(
        ((m + 127) // 128 * 128, (kk // 16 + 3) // 4 * 4),
        dtype=torch.float8_e4m3fn,
        device=q.device,
    )
    run(
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
        packed,
        2,
        out_global_scale,
        sf,
    )
    return packed, sf
