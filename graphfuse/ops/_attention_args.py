"""Argument validation and output shapes shared by the fused attention ops' fake impls and
pure-PyTorch references (the C++ kernel repeats the same checks with the same messages).

Conventions (see ``graphfuse/ops/_library.py``): q ``[B, Hq, Sq, D]``, k/v ``[B, Hkv, Skv, D]``.
A scale given with a non-FP8 input multiplies that input too (it is read as a dequant scale,
whatever the input dtype); an FP8 input without its scale is an error.
"""

from __future__ import annotations

import torch

from ._checks import check_input_dtype, check_scale, fail

CAUSAL_MODES = ("none", "top_left", "bottom_right")
LAYOUTS = ("bhsd", "bshd", "bs(hd)", "(bs)(hd)")
PRECISIONS = ("default", "fast")


def check_attention_args(
    op: str,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_scale: torch.Tensor | None,
    k_scale: torch.Tensor | None,
    v_scale: torch.Tensor | None,
    attn_mask: torch.Tensor | None,
    causal: str,
    layout: str,
    precision: str,
) -> None:
    """Validate the shared arguments of ``graphfuse::attention*``.

    Args:
        op: op name for error messages (e.g. ``"attention_fp8"``).
        q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, layout, precision: the op's
            arguments (schema in ``graphfuse/ops/_library.py``).

    Raises:
        RuntimeError: naming the op and the offending values.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            fail(op, f"{name} must be 4-D [B, H, S, D], got shape {list(t.shape)}")
        check_input_dtype(op, name, t)
    for name, t, s in (("q", q, q_scale), ("k", k, k_scale), ("v", v, v_scale)):
        if t.dtype == torch.float8_e4m3fn and s is None:
            fail(op, f"{name} is float8_e4m3fn but {name}_scale is None")
        check_scale(op, f"{name}_scale", s)
    devices = {t.device for t in (q, k, v, attn_mask) if t is not None}
    if len(devices) > 1:
        fail(op, f"q, k, v and attn_mask must be on one device, got {sorted(map(str, devices))}")
    b, hq, sq, d = q.shape
    if tuple(k.shape) != tuple(v.shape):
        fail(op, f"k and v must have the same shape, got {list(k.shape)} and {list(v.shape)}")
    bk, hkv, skv, dk = k.shape
    if bk != b or dk != d:
        fail(
            op,
            f"k/v shape {list(k.shape)} does not match q shape {list(q.shape)} "
            "(batch and head_dim must agree)",
        )
    if hkv == 0 or hq % hkv != 0:
        fail(op, f"Hq={hq} must be a multiple of Hkv={hkv}")
    if causal not in CAUSAL_MODES:
        fail(op, f"unknown causal {causal!r} (one of {', '.join(CAUSAL_MODES)})")
    if layout not in LAYOUTS:
        fail(op, f"unknown layout {layout!r} (one of {', '.join(LAYOUTS)})")
    if precision not in PRECISIONS:
        fail(op, f"unknown precision {precision!r} (one of {', '.join(PRECISIONS)})")
    if attn_mask is not None:
        if attn_mask.dtype != torch.bool and not attn_mask.dtype.is_floating_point:
            fail(op, f"attn_mask must be bool or floating, got {attn_mask.dtype}")
        if attn_mask.dtype == torch.float8_e4m3fn:
            fail(op, "attn_mask of dtype float8_e4m3fn is not supported")
        target = (b, hq, sq, skv)
        shape = tuple(attn_mask.shape)
        ok = len(shape) <= 4 and all(
            m == 1 or m == t for m, t in zip(shape[::-1], target[::-1], strict=False)
        )
        if not ok:
            fail(
                op,
                f"attn_mask of shape {list(shape)} is not broadcastable to "
                f"[B, Hq, Sq, Skv] = {list(target)}",
            )


def check_out_scale(op: str, name: str, s: torch.Tensor) -> None:
    """Check the output scale (``out_scale`` / ``out_global_scale``) has one element."""
    check_scale(op, name, s)


def out_shape(layout: str, b, h, s, d) -> list:
    """Shape of the attention output ``[B, H, S, D]`` written in ``layout``."""
    if layout == "bhsd":
        return [b, h, s, d]
    if layout == "bshd":
        return [b, s, h, d]
    if layout == "bs(hd)":
        return [b, s, h * d]
    return [b * s, h * d]


def nvfp4_rows_cols(layout: str, b, h, s, d) -> tuple:
    """(M, K): the output in ``layout`` viewed as 2-D (K its last dimension)."""
    shape = out_shape(layout, b, h, s, d)
    m = 1
    for x in shape[:-1]:
        m = m * x
    return m, shape[-1]
