"""Fake (meta) impls of the quantization ops: output shapes and dtypes, symbolic shapes too."""

from __future__ import annotations

import math

import torch

from .quant_ref import nvfp4_scale_shape

_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def _check_scale(op: str, name: str, s: torch.Tensor) -> None:
    torch._check(s.numel() == 1, lambda: f"{op}: {name} must have exactly one element")


@torch.library.register_fake("graphfuse::fp8_static_quant")
def _fp8_static_quant_fake(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    _check_scale("graphfuse::fp8_static_quant", "scale", scale)
    torch._check(x.dtype in _FLOATS, lambda: f"graphfuse::fp8_static_quant: x dtype {x.dtype}")
    return x.new_empty(x.shape, dtype=torch.float8_e4m3fn)


@torch.library.register_fake("graphfuse::fp8_dequant")
def _fp8_dequant_fake(x: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    _check_scale("graphfuse::fp8_dequant", "scale", scale)
    torch._check(dtype in _FLOATS, lambda: f"graphfuse::fp8_dequant: dtype {dtype}")
    return x.new_empty(x.shape, dtype=dtype)


@torch.library.register_fake("graphfuse::nvfp4_quant")
def _nvfp4_quant_fake(
    x: torch.Tensor, global_scale: torch.Tensor, swizzle: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    op = "graphfuse::nvfp4_quant"
    _check_scale(op, "global_scale", global_scale)
    torch._check(x.dim() >= 1, lambda: f"{op}: x must have rank >= 1")
    k = x.shape[-1]
    torch._check(k % 16 == 0, lambda: f"{op}: K={k} must be a multiple of 16")
    m = math.prod(x.shape[:-1])
    packed = x.new_empty((m, k // 2), dtype=torch.uint8)
    return packed, x.new_empty(nvfp4_scale_shape(m, k, swizzle), dtype=torch.float8_e4m3fn)


@torch.library.register_fake("graphfuse::nvfp4_dequant")
def _nvfp4_dequant_fake(packed, block_scale, global_scale, dtype, swizzled=True):
    op = "graphfuse::nvfp4_dequant"
    _check_scale(op, "global_scale", global_scale)
    torch._check(packed.dim() == 2, lambda: f"{op}: packed must be 2-D")
    torch._check(dtype in _FLOATS, lambda: f"{op}: dtype {dtype}")
    m, half_k = packed.shape
    return packed.new_empty((m, half_k * 2), dtype=dtype)
