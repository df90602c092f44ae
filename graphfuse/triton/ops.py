"""CUDA impls of every ``graphfuse::`` op (registered lazily by ``_register.py``): argument
checks, output allocation, and the launch of the family's kernels -- ``quant``, ``norm_act``,
``prefill`` and ``decode`` (the dense attention ops send Sq == 1 without a mask to the decode
kernel).
Impl arguments follow the schemas of ``graphfuse/ops/_library.py``."""

from __future__ import annotations

from collections.abc import Callable

import torch

from graphfuse.ops._checks import empty_outputs
from graphfuse.ops._fake_attention import attention_outputs
from graphfuse.ops._fake_paged import paged_outputs

from .decode.launch import decode_into
from .decode.paged import paged_into
from .norm_act import launch as norm_act
from .prefill.config import out_strides
from .prefill.launch import attention_into
from .quant import launch as quant

FP8 = torch.float8_e4m3fn


def _cuda(op: str, t: torch.Tensor, name: str) -> None:
    if not t.is_cuda:
        raise ValueError(f"graphfuse::{op}: {name} must be a CUDA tensor, got {t.device}")


# -- quant ---------------------------------------------------------------------------------


def fp8_static_quant(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    _cuda("fp8_static_quant", x, "x")
    out = torch.empty(x.shape, dtype=FP8, device=x.device)
    quant.fp8_static_quant_into(x, scale, out)
    return out


def fp8_dequant(x: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    _cuda("fp8_dequant", x, "x")
    out = torch.empty(x.shape, dtype=dtype, device=x.device)
    quant.fp8_dequant_into(x, scale, out)
    return out


def nvfp4_quant(x: torch.Tensor, global_scale: torch.Tensor, swizzle: bool = True):
    _cuda("nvfp4_quant", x, "x")
    m, k = quant.nvfp4_rows_cols("nvfp4_quant", x.shape, x.shape[-1] if x.dim() else 0)
    packed = torch.empty((m, k // 2), dtype=torch.uint8, device=x.device)
    scale = torch.empty(quant.nvfp4_scale_shape(m, k, swizzle), dtype=FP8, device=x.device)
    quant.nvfp4_quant_into(x, global_scale, packed, scale, swizzle)
    return packed, scale


def nvfp4_dequant(packed, block_scale, global_scale, dtype, swizzled: bool = True):
    _cuda("nvfp4_dequant", packed, "packed")
    shape = (*packed.shape[:-1], 2 * packed.shape[-1]) if packed.dim() else ()
    out = torch.empty(shape, dtype=dtype, device=packed.device)
    quant.nvfp4_dequant_into(packed, block_scale, global_scale, out, swizzled)
    return out


# -- norm / activation + quant --------------------------------------------------------------


def _nvfp4_outputs(op: str, x: torch.Tensor, swizzle: bool):
    m, k = quant.nvfp4_rows_cols(op, x.shape, x.shape[-1] if x.dim() else 0)
    packed = torch.empty((m, k // 2), dtype=torch.uint8, device=x.device)
    return packed, torch.empty(quant.nvfp4_scale_shape(m, k, swizzle), dtype=FP8, device=x.device)


def rms_norm_quant_fp8(x, weight, eps, scale, norm_dtype=None, weight_first=False):
    _cuda("rms_norm_quant_fp8", x, "x")
    out = torch.empty(x.shape, dtype=FP8, device=x.device)
    norm_act.rms_norm_quant_fp8_into(x, weight, eps, scale, out, norm_dtype, weight_first)
    return out


def add_rms_norm_quant_fp8(x, residual, weight, eps, scale, norm_dtype=None, weight_first=False):
    _cuda("add_rms_norm_quant_fp8", x, "x")
    out = torch.empty(x.shape, dtype=FP8, device=x.device)
    h = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    norm_act.rms_norm_quant_fp8_into(
        x, weight, eps, scale, out, norm_dtype, weight_first, residual, h
    )
    return out, h


def rms_norm_quant_nvfp4(
    x, weight, eps, global_scale, norm_dtype=None, weight_first=False, swizzle=True
):
    _cuda("rms_norm_quant_nvfp4", x, "x")
    packed, sf = _nvfp4_outputs("rms_norm_quant_nvfp4", x, swizzle)
    norm_act.rms_norm_quant_nvfp4_into(
        x, weight, eps, global_scale, packed, sf, norm_dtype, weight_first, swizzle
    )
    return packed, sf


def add_rms_norm_quant_nvfp4(
    x, residual, weight, eps, global_scale, norm_dtype=None, weight_first=False, swizzle=True
):
    _cuda("add_rms_norm_quant_nvfp4", x, "x")
    packed, sf = _nvfp4_outputs("add_rms_norm_quant_nvfp4", x, swizzle)
    h = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    norm_act.rms_norm_quant_nvfp4_into(
        x, weight, eps, global_scale, packed, sf, norm_dtype, weight_first, swizzle, residual, h
    )
    return packed, sf, h


def act_and_mul_quant_fp8(gate, up, scale, activation="silu"):
    _cuda("act_and_mul_quant_fp8", gate, "gate")
    out = torch.empty(gate.shape, dtype=FP8, device=gate.device)
    norm_act.act_and_mul_quant_fp8_into(gate, up, scale, out, activation)
    return out


def act_and_mul_quant_nvfp4(gate, up, global_scale, activation="silu", swizzle=True):
    _cuda("act_and_mul_quant_nvfp4", gate, "gate")
    packed, sf = _nvfp4_outputs("act_and_mul_quant_nvfp4", gate, swizzle)
    norm_act.act_and_mul_quant_nvfp4_into(gate, up, global_scale, packed, sf, activation, swizzle)
    return packed, sf


# -- fused attention (prefill, or decode for Sq == 1) -----------------------------------------


def attention_run(
    q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, scale, layout, precision, out,
    out_kind: int, out_scale=None, sf=None, config: dict | None = None,
) -> None:  # fmt: skip
    """Writes the attention into ``out`` (``sf``): Sq == 1 without an explicit mask, 16-bit or
    FP8 K/V with D contiguous goes to the split-KV decode kernel (``top_left`` with Sq == 1
    keeps key 0 only: a prefill case), everything else to ``prefill.launch.attention_into``
    (``config``: its overrides)."""
    decode = q.shape[2] == 1 and attn_mask is None and causal in ("none", "bottom_right")
    d_contig = q.stride(-1) == k.stride(-1) == v.stride(-1) == 1
    if decode and k.dtype != torch.float32 and d_contig:
        b, h, _, d = q.shape
        sob, soh, _ = out_strides(layout, b, h, 1, d)
        decode_into(
            q[:, :, 0], k, v, q_scale, k_scale, v_scale, scale, out, out_kind, (sob, soh),
            out_scale, sf,
        )  # fmt: skip
    else:
        attention_into(
            q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, scale, layout, precision,
            out, out_kind, out_scale, sf, config,
        )  # fmt: skip


def _fused(op: str, args: tuple, out_kind: int, paged: bool):
    """The fused attention op ``op`` (``args`` as its schema; paged decode or dense) with
    output kind 0 / 1 / 2."""
    specs = (paged_outputs if paged else attention_outputs)(op, args, out_kind)
    q, last = args[0], args[-1]
    strided = paged and (q.stride(-1) != 1 or args[1].stride(-1) != 1)
    if q.shape[-1] > 256 or strided:
        raise RuntimeError(
            f"graphfuse::{op}: the Triton kernels need head_dim <= 256"
            + (" and a contiguous head_dim" if paged else "")
            + f", got D={q.shape[-1]}, strides {q.stride()}, {args[1].stride()}"
        )
    outs = empty_outputs(q, specs)
    out, sf = outs if out_kind == 2 else (outs, None)
    launch = paged_into if paged else attention_run
    launch(*args[:-1], out, out_kind, None if out_kind == 0 else last, sf)
    return outs


def _fused_impl(op: str, out_kind: int, paged: bool) -> Callable:
    def impl(*args):
        return _fused(op, args, out_kind, paged)

    impl.__name__ = op
    return impl


# op name -> CUDA impl, for ``_register.py``
IMPLS: dict[str, Callable] = {
    "fp8_static_quant": fp8_static_quant,
    "fp8_dequant": fp8_dequant,
    "nvfp4_quant": nvfp4_quant,
    "nvfp4_dequant": nvfp4_dequant,
    "rms_norm_quant_fp8": rms_norm_quant_fp8,
    "add_rms_norm_quant_fp8": add_rms_norm_quant_fp8,
    "rms_norm_quant_nvfp4": rms_norm_quant_nvfp4,
    "add_rms_norm_quant_nvfp4": add_rms_norm_quant_nvfp4,
    "act_and_mul_quant_fp8": act_and_mul_quant_fp8,
    "act_and_mul_quant_nvfp4": act_and_mul_quant_nvfp4,
}
for _paged, _base in ((False, "attention"), (True, "paged_decode_attention")):
    for _kind, _op in enumerate((_base, f"{_base}_fp8", f"{_base}_nvfp4")):
        IMPLS[_op] = _fused_impl(_op, _kind, _paged)
