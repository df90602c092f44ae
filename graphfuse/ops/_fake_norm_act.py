"""Fake (meta) impls of the fused norm / activation + quant ops: output shapes and dtypes,
symbolic shapes too."""

from __future__ import annotations

import math

import torch

from .quant_ref import round_up

_FLOATS = (torch.float32, torch.bfloat16, torch.float16)
_ACTIVATIONS = ("silu", "gelu_tanh")


def _check_scale(op: str, name: str, s: torch.Tensor) -> None:
    torch._check(s.numel() == 1, lambda: f"{op}: {name} must have exactly one element")


def _check_norm(op, x, weight, norm_dtype, residual=None) -> None:
    torch._check(x.dtype in _FLOATS, lambda: f"{op}: x dtype {x.dtype}")
    torch._check(x.dim() >= 1, lambda: f"{op}: x must have rank >= 1")
    torch._check(
        weight.dim() == 1 and weight.shape[0] == x.shape[-1],
        lambda: f"{op}: weight must have shape [{x.shape[-1]}], got {list(weight.shape)}",
    )
    torch._check(weight.dtype in _FLOATS, lambda: f"{op}: weight dtype {weight.dtype}")
    torch._check(norm_dtype is None or norm_dtype in _FLOATS, lambda: f"{op}: {norm_dtype}")
    if residual is not None:
        torch._check(
            residual.dtype == x.dtype and residual.shape == x.shape,
            lambda: f"{op}: residual must have x's shape and dtype",
        )


def _check_act(op, gate, up, activation) -> None:
    torch._check(gate.dtype in _FLOATS, lambda: f"{op}: gate dtype {gate.dtype}")
    torch._check(gate.dim() >= 1, lambda: f"{op}: gate must have rank >= 1")
    torch._check(
        up.dtype == gate.dtype and up.shape == gate.shape,
        lambda: f"{op}: up must have gate's shape and dtype",
    )
    torch._check(activation in _ACTIVATIONS, lambda: f"{op}: activation {activation!r}")


def _nvfp4(op: str, x: torch.Tensor, swizzle: bool) -> tuple[torch.Tensor, torch.Tensor]:
    k = x.shape[-1]
    torch._check(k % 16 == 0, lambda: f"{op}: K={k} must be a multiple of 16")
    m = math.prod(x.shape[:-1])
    kb = k // 16
    shape = (round_up(m, 128), round_up(kb, 4)) if swizzle else (m, kb)
    packed = x.new_empty((m, k // 2), dtype=torch.uint8)
    return packed, x.new_empty(shape, dtype=torch.float8_e4m3fn)


@torch.library.register_fake("graphfuse::rms_norm_quant_fp8")
def _rms_norm_quant_fp8_fake(x, weight, eps, scale, norm_dtype=None, weight_first=False):
    op = "graphfuse::rms_norm_quant_fp8"
    _check_norm(op, x, weight, norm_dtype)
    _check_scale(op, "scale", scale)
    return x.new_empty(x.shape, dtype=torch.float8_e4m3fn)


@torch.library.register_fake("graphfuse::add_rms_norm_quant_fp8")
def _add_rms_norm_quant_fp8_fake(
    x, residual, weight, eps, scale, norm_dtype=None, weight_first=False
):
    op = "graphfuse::add_rms_norm_quant_fp8"
    _check_norm(op, x, weight, norm_dtype, residual)
    _check_scale(op, "scale", scale)
    return x.new_empty(x.shape, dtype=torch.float8_e4m3fn), x.new_empty(x.shape)


@torch.library.register_fake("graphfuse::rms_norm_quant_nvfp4")
def _rms_norm_quant_nvfp4_fake(
    x, weight, eps, global_scale, norm_dtype=None, weight_first=False, swizzle=True
):
    op = "graphfuse::rms_norm_quant_nvfp4"
    _check_norm(op, x, weight, norm_dtype)
    _check_scale(op, "global_scale", global_scale)
    return _nvfp4(op, x, swizzle)


@torch.library.register_fake("graphfuse::add_rms_norm_quant_nvfp4")
def _add_rms_norm_quant_nvfp4_fake(
    x, residual, weight, eps, global_scale, norm_dtype=None, weight_first=False, swizzle=True
):
    op = "graphfuse::add_rms_norm_quant_nvfp4"
    _check_norm(op, x, weight, norm_dtype, residual)
    _check_scale(op, "global_scale", global_scale)
    return (*_nvfp4(op, x, swizzle), x.new_empty(x.shape))


@torch.library.register_fake("graphfuse::act_and_mul_quant_fp8")
def _act_and_mul_quant_fp8_fake(gate, up, scale, activation="silu"):
    op = "graphfuse::act_and_mul_quant_fp8"
    _check_act(op, gate, up, activation)
    _check_scale(op, "scale", scale)
    return gate.new_empty(gate.shape, dtype=torch.float8_e4m3fn)


@torch.library.register_fake("graphfuse::act_and_mul_quant_nvfp4")
def _act_and_mul_quant_nvfp4_fake(gate, up, global_scale, activation="silu", swizzle=True):
    op = "graphfuse::act_and_mul_quant_nvfp4"
    _check_act(op, gate, up, activation)
    _check_scale(op, "global_scale", global_scale)
    return _nvfp4(op, gate, swizzle)
