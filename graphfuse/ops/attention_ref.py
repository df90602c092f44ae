"""Pure-PyTorch references of the fused attention ops (the definition the kernels are tested
against): attention computed in fp32 (or wider) from the dequantized inputs, then the
docs/numerics.md quantizers of ``graphfuse.ops.quant_ref``.

Example:
    >>> q = torch.randn(1, 8, 16, 64); k = torch.randn(1, 2, 16, 64); v = torch.randn_like(k)
    >>> wide = attention_fp32(q, k, v, causal="top_left", layout="bs(hd)")  # [1, 16, 512]
"""

from __future__ import annotations

import torch

from ._attention_args import check_attention_args, check_out_scale
from ._checks import check_nvfp4_head_dim, check_wide_out
from .quant_ref import fp8_static_quant_ref, nvfp4_quant_ref

__all__ = ["attention_fp32", "attention_ref", "attention_fp8_ref", "attention_nvfp4_ref"]


def _dequant(x: torch.Tensor, s: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    y = x.to(dtype)
    if s is not None:
        y = y * s.reshape(()).to(torch.float32).to(dtype)
    return y


def _keep_mask(causal: str, sq: int, skv: int, device: torch.device) -> torch.Tensor | None:
    """Bool [Sq, Skv]: True where query i may see key j under ``causal``."""
    if causal == "none":
        return None
    offset = 0 if causal == "top_left" else skv - sq
    i = torch.arange(sq, device=device).unsqueeze(1)
    j = torch.arange(skv, device=device).unsqueeze(0)
    return j <= i + offset


def attention_fp32(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_scale: torch.Tensor | None = None,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    attn_mask: torch.Tensor | None = None,
    causal: str = "none",
    scale: float | None = None,
    layout: str = "bhsd",
    precision: str = "default",
    *,
    compute_dtype: torch.dtype = torch.float32,
    fp8_p: bool = False,
) -> torch.Tensor:
    """The wide attention output, in ``layout``, computed in ``compute_dtype``.

    Args:
        q, k, v: ``[B, Hq, Sq, D]`` / ``[B, Hkv, Skv, D]``, float32/bfloat16/float16/float8_e4m3fn.
        q_scale, k_scale, v_scale: dequant scales (required for FP8 inputs; multiply others).
        attn_mask: bool (True = keep) or additive, broadcastable to ``[B, Hq, Sq, Skv]``.
        causal: ``"none"``, ``"top_left"`` (SDPA ``is_causal``) or ``"bottom_right"``.
        scale: softmax scale (None: ``1/sqrt(D)``).
        layout: ``"bhsd"``, ``"bshd"``, ``"bs(hd)"`` or ``"(bs)(hd)"``.
        precision: ``"default"`` or ``"fast"`` (the reference is the same for both).
        compute_dtype: float32 (default) or float64.
        fp8_p: round the probabilities as fast mode does (``256 * P`` to e4m3, P relative to
            the exact row max) before ``P @ V``; the denominator stays the exact row sum. The
            format's own error, for judging a fast-mode kernel (which rounds against its
            running max instead); not an op's reference.

    Returns:
        The attention output in ``compute_dtype`` and ``layout``; rows whose every key is
        masked are zeros.
    """
    check_attention_args(
        "attention", q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, layout, precision
    )
    b, hq, sq, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    qf = _dequant(q, q_scale, compute_dtype)
    kf = _dequant(k, k_scale, compute_dtype).repeat_interleave(hq // hkv, dim=1)
    vf = _dequant(v, v_scale, compute_dtype).repeat_interleave(hq // hkv, dim=1)
    sm_scale = 1.0 / d**0.5 if scale is None else scale
    logits = (qf @ kf.transpose(-1, -2)) * sm_scale
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            logits = logits.masked_fill(~attn_mask, float("-inf"))
        else:
            logits = logits + attn_mask.to(compute_dtype)
    keep = _keep_mask(causal, sq, skv, q.device)
    if keep is not None:
        logits = logits.masked_fill(~keep, float("-inf"))
    m = logits.amax(dim=-1, keepdim=True) if skv > 0 else logits.new_zeros(b, hq, sq, 1)
    m = torch.where(torch.isinf(m) & (m < 0), torch.zeros_like(m), m)
    p = torch.exp(logits - m)
    denom = p.sum(dim=-1, keepdim=True)
    if fp8_p:
        p = (p * 256).to(torch.float8_e4m3fn).to(compute_dtype) / 256
    out = (p @ vf) / torch.where(denom > 0, denom, torch.ones_like(denom))
    out = torch.where(denom > 0, out, torch.zeros_like(out))
    return to_layout(out, layout)


def to_layout(out: torch.Tensor, layout: str) -> torch.Tensor:
    """Write a ``[B, H, S, D]`` tensor in ``layout`` (contiguous)."""
    b, h, s, d = out.shape
    if layout == "bhsd":
        return out.contiguous()
    t = out.transpose(1, 2).contiguous()
    if layout == "bshd":
        return t
    if layout == "bs(hd)":
        return t.reshape(b, s, h * d)
    return t.reshape(b * s, h * d)


def attention_ref(
    q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, scale, layout, precision, out_dtype
) -> torch.Tensor:
    """Reference of ``graphfuse::attention``: the fp32 output rounded once to ``out_dtype``.

    Args: as the op (see :func:`attention_fp32`); ``out_dtype`` float32/bfloat16/float16.

    Returns:
        The output in ``layout`` and ``out_dtype``.
    """
    check_wide_out("attention", out_dtype)
    wide = attention_fp32(
        q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, scale, layout, precision
    )
    return wide.to(out_dtype)


def attention_fp8_ref(
    q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, scale, layout, precision, out_scale
) -> torch.Tensor:
    """Reference of ``graphfuse::attention_fp8``: ``fp8_static_quant_ref(attention, s_o)``.

    Args: as the op; ``out_scale`` is the output's dequant scale s_o.

    Returns:
        float8_e4m3fn output in ``layout``.
    """
    check_out_scale("attention_fp8", "out_scale", out_scale)
    wide = attention_fp32(
        q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, scale, layout, precision
    )
    return fp8_static_quant_ref(wide, out_scale)


def attention_nvfp4_ref(
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
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference of ``graphfuse::attention_nvfp4``: ``nvfp4_quant_ref`` of the output in
    ``layout`` viewed as 2-D ``[M, K]``, swizzled block scales.

    Args: as the op; ``out_global_scale`` is the encode global scale g.

    Returns:
        (packed uint8 ``[M, K/2]``, swizzled float8_e4m3fn block scales).
    """
    check_out_scale("attention_nvfp4", "out_global_scale", out_global_scale)
    check_nvfp4_head_dim("attention_nvfp4", q.shape[-1])
    wide = attention_fp32(
        q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, scale, layout, precision
    )
    return nvfp4_quant_ref(wide, out_global_scale, swizzle=True)
