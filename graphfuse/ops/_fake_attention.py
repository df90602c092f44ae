"""Fake (meta) impls of the fused attention ops: output shapes and dtypes, symbolic-safe."""

from __future__ import annotations

import torch

from ._attention_args import check_attention_args, nvfp4_rows_cols, out_shape
from ._checks import empty_outputs, output_specs


def attention_outputs(op: str, args: tuple, out_kind: int) -> list:
    """The checked output specs (``output_specs``) of attention op ``op`` called with
    ``args`` (as its schema), output kind 0 / 1 / 2."""
    *inputs, last = args
    q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, _scale, layout, precision = inputs
    check_attention_args(
        op, q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, layout, precision
    )
    b, h, s, d = q.shape
    view = nvfp4_rows_cols(layout, b, h, s, d)
    return output_specs(op, out_kind, last, out_shape(layout, b, h, s, d), view, d)


def _register(op: str, out_kind: int) -> None:
    @torch.library.register_fake(f"graphfuse::{op}")
    def fake(*args):
        return empty_outputs(args[0], attention_outputs(op, args, out_kind))


for _kind, _op in enumerate(("attention", "attention_fp8", "attention_nvfp4")):
    _register(_op, _kind)
