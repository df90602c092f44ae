"""Fake (meta) impls of the fused attention ops: output shapes and dtypes, symbolic-safe."""

from __future__ import annotations

import torch

from ._attention_args import (
    WIDE_OUT_DTYPES,
    check_attention_args,
    check_nvfp4_head_dim,
    check_out_scale,
    nvfp4_rows_cols,
    out_shape,
)
from .quant_ref import round_up


def _shape(op, q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, layout, precision):
    check_attention_args(
        op, q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, layout, precision
    )
    b, hq, sq, d = q.shape
    return b, hq, sq, d


@torch.library.register_fake("graphfuse::attention")
def _attention_fake(
    q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, scale, layout, precision, out_dtype
):
    b, h, s, d = _shape(
        "attention", q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, layout, precision
    )
    if out_dtype not in WIDE_OUT_DTYPES:
        raise RuntimeError(
            f"graphfuse::attention: unsupported out_dtype {out_dtype} (float32, bfloat16, "
            "float16; use attention_fp8 / attention_nvfp4 for quantized output)"
        )
    return q.new_empty(out_shape(layout, b, h, s, d), dtype=out_dtype)


@torch.library.register_fake("graphfuse::attention_fp8")
def _attention_fp8_fake(
    q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, scale, layout, precision, out_scale
):
    b, h, s, d = _shape(
        "attention_fp8", q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, layout, precision
    )
    check_out_scale("attention_fp8", "out_scale", out_scale)
    return q.new_empty(out_shape(layout, b, h, s, d), dtype=torch.float8_e4m3fn)


@torch.library.register_fake("graphfuse::attention_nvfp4")
def _attention_nvfp4_fake(
    q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, scale, layout, precision, g
):
    op = "attention_nvfp4"
    b, h, s, d = _shape(
        op, q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, layout, precision
    )
    check_out_scale(op, "out_global_scale", g)
    check_nvfp4_head_dim(op, d)
    m, kk = nvfp4_rows_cols(layout, b, h, s, d)
    packed = q.new_empty([m, kk // 2], dtype=torch.uint8)
    scales = q.new_empty([round_up(m, 128), round_up(kk // 16, 4)], dtype=torch.float8_e4m3fn)
    return packed, scales
