"""Argument checks shared by the fused attention and paged decode ops' fake impls, references
and CUDA impls (the C++ kernels repeat them with the same messages). Every failure raises
RuntimeError naming the op."""

from __future__ import annotations

import torch

from .quant_ref import nvfp4_scale_shape

FP8 = torch.float8_e4m3fn
INPUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16, FP8)
WIDE_OUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def fail(op: str, msg: str) -> None:
    raise RuntimeError(f"graphfuse::{op}: {msg}")


def check_scale(op: str, name: str, s: torch.Tensor | None) -> None:
    """A scale (None allowed) has one element (shape [], [1] or [1, 1]) of a floating dtype."""
    if s is None:
        return
    if s.numel() != 1 or s.dim() > 2:
        fail(
            op,
            f"{name} must hold exactly one element (shape [], [1] or [1, 1]), got shape "
            f"{list(s.shape)}",
        )
    if not s.dtype.is_floating_point:
        fail(op, f"{name} must be a floating tensor, got {s.dtype}")


def check_input_dtype(op: str, name: str, t: torch.Tensor) -> None:
    if t.dtype not in INPUT_DTYPES:
        fail(op, f"unsupported {name} dtype {t.dtype} (float32, bfloat16, float16, float8_e4m3fn)")


def check_wide_out(op: str, dtype: torch.dtype) -> None:
    """A 16/32-bit output dtype (the quantized outputs have their own ops)."""
    if dtype not in WIDE_OUT_DTYPES:
        fail(
            op,
            f"unsupported out_dtype {dtype} (float32, bfloat16, float16; use the _fp8 / _nvfp4 "
            "variants for quantized output)",
        )


def check_nvfp4_head_dim(op: str, d) -> None:
    """NVFP4 output needs head_dim % 16 == 0 (a block of 16 never spans two heads)."""
    if d % 16 != 0:
        fail(op, f"NVFP4 output needs head_dim D % 16 == 0, got D={d}")


def nvfp4_shapes(m, k) -> tuple[list, list]:
    """(packed, swizzled block-scale) shapes of NVFP4 over an ``[M, K]`` view (ints or SymInts)."""
    return [m, k // 2], list(nvfp4_scale_shape(m, k))


def output_specs(op: str, out_kind: int, last, shape: list, nvfp4_view: tuple, d) -> list:
    """The checked ``(shape, dtype)`` of each output of a fused attention / paged decode op
    whose last argument is ``last``: ``out_kind`` 0, ``out_dtype`` ``last`` (16/32-bit) in
    ``shape``; 1, FP8 in ``shape`` (``last`` its ``out_scale``); 2, NVFP4 over the 2-D view
    ``nvfp4_view`` = (M, K) (``last`` its ``out_global_scale``; head dim ``d``)."""
    if out_kind == 0:
        check_wide_out(op, last)
        return [(shape, last)]
    check_scale(op, "out_scale" if out_kind == 1 else "out_global_scale", last)
    if out_kind == 1:
        return [(shape, FP8)]
    check_nvfp4_head_dim(op, d)
    packed, scales = nvfp4_shapes(*nvfp4_view)
    return [(packed, torch.uint8), (scales, FP8)]


def empty_outputs(like: torch.Tensor, specs: list):
    """New tensors on ``like``'s device for ``output_specs``'s result: one, or a tuple."""
    outs = [like.new_empty(shape, dtype=dtype) for shape, dtype in specs]
    return outs[0] if len(outs) == 1 else tuple(outs)
