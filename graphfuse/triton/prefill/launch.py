"""Launchers of the prefill kernels: ``attention_into`` applies the rule of
``prefill/__init__.py`` (``uses_gluon``) and launches the Gluon kernel
(``gluon_attention_into``) or the Triton kernel (``triton_attention_into``); ``k_major``
and ``fast_v_tiles`` are fast mode's per-call K-major copies of an FP8 V for either."""

from __future__ import annotations

import functools
import math

import torch
import triton

from ..host import TL_DTYPE, sm_count, zero_scale_padding
from ..quant.launch import fp8_upcast
from .config import (
    TILE_KNOBS,
    WS_BLOCK_M,
    WS_BLOCK_N,
    default_config,
    dot_dtypes,
    mask_args,
    nvfp4_row_strides,
    out_strides,
    rows_view,
    ws_eligible,
    ws_stages,
)
from .triton_kernel import attention_kernel, transpose_bytes

FP8 = torch.float8_e4m3fn


@functools.cache
def _gluon_hopper(device: torch.device) -> bool:
    """An sm_90 device and a Triton with Gluon's Hopper layer (``gluon_kernel.py``)."""
    if torch.cuda.get_device_capability(device) != (9, 0):
        return False
    try:
        from . import gluon_kernel  # noqa: F401
    except (ImportError, AttributeError):  # no Gluon, or an older Gluon API
        return False
    return True


def uses_gluon(q, k, v, attn_mask, out, out_kind: int, ws: bool = True) -> bool:
    """The rule: the warp-specialised Gluon kernel serves the calls ``ws_eligible`` accepts
    on an sm_90 device with Gluon (unless ``ws`` is False); the Triton kernel all others."""
    return ws and ws_eligible(q, k, v, attn_mask, out, out_kind) and _gluon_hopper(q.device)


def attention_into(
    q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, scale, layout, precision,
    out: torch.Tensor, out_kind: int, out_scale=None, sf=None, config: dict | None = None,
) -> None:  # fmt: skip
    """Launches the fused prefill attention writing into ``out`` (and ``sf`` for NVFP4).

    Args:
        q, k, v, ...: the op's arguments (already validated by the caller).
        out: the output (layout shape; fp8 / wide dtype) or NVFP4 packed ``[M, K/2]``.
        out_kind: 0 wide, 1 FP8, 2 NVFP4.
        out_scale: FP8 dequant scale s_o or NVFP4 encode global scale g.
        sf: NVFP4 swizzled block scales (float8_e4m3fn), padding zeroed here.
        config: overrides of ``default_config``'s entries (``WS``, tile sizes).
    """
    b, h, sq, d = q.shape
    if b * h * sq == 0:
        return
    args = (q, k, v, q_scale, k_scale, v_scale)
    cfg = dict(config or {})
    if uses_gluon(q, k, v, attn_mask, out, out_kind, cfg.pop("WS", True)):
        fast = dot_dtypes(q, k, v, precision)[2]
        gluon_attention_into(*args, causal, scale, layout, out, out_kind, out_scale, sf, fast)
    else:
        triton_attention_into(
            *args, attn_mask, causal, scale, layout, precision, out, out_kind, out_scale, sf, cfg
        )


def _nvfp4_out(out, sf, out_kind: int, d: int) -> tuple[int, int]:
    """(K, padded scale columns) of the NVFP4 output's 2-D view, its scale padding zeroed;
    (d, 4) for other outputs."""
    if out_kind != 2:
        return d, 4
    nv_k = out.shape[1] * 2
    zero_scale_padding(sf, out.shape[0], nv_k // 16)
    return nv_k, sf.shape[1]


def triton_attention_into(
    q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, scale, layout, precision, out,
    out_kind, out_scale, sf, config: dict,
) -> None:  # fmt: skip
    """Launches the Triton kernel (``triton_kernel.attention_kernel``); ``config`` overrides
    the tile table's entries (``TILE_KNOBS``; unknown keys raise ValueError)."""
    b, h, sq, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    qk_dt, pv_dt, fast = dot_dtypes(q, k, v, precision)
    dp = max(16, triton.next_power_of_2(d))
    mask_kind, mask, mstr = mask_args(attn_mask, b, h, sq, skv, q)
    unknown = set(config) - set(TILE_KNOBS)
    if unknown:
        raise ValueError(f"unknown prefill config keys {sorted(unknown)}: knobs are {TILE_KNOBS}")
    cfg = default_config(qk_dt, dp, sq, out_kind=out_kind, mask_kind=mask_kind)
    cfg.pop("WS")
    cfg.update(config)
    if fast and v.dtype == FP8 and sq > 16 and v.stride(-2) != 1:
        v = k_major(v)  # K-major FP8 V for the FP8 P·V (prefill/__init__.py)
    nv_k, nv_kbpad = _nvfp4_out(out, sf, out_kind, d)
    causal_off = 0 if causal != "bottom_right" else skv - sq
    grid = (b * h, triton.cdiv(sq, cfg["BLOCK_M"]))
    attention_kernel[grid](
        q, k, v, q_scale if q_scale is not None else q, k_scale if k_scale is not None else q,
        v_scale if v_scale is not None else q, mask, out_scale if out_scale is not None else q,
        out, sf.view(torch.uint8) if sf is not None else out,
        *q.stride(), *k.stride(), *v.stride(), *mstr, *out_strides(layout, b, h, sq, d),
        h, h // hkv, sq, skv, d, 1.0 / math.sqrt(d) if scale is None else float(scale),
        causal_off, nv_k, nv_kbpad, *nvfp4_row_strides(layout, h, sq, d),
        HAS_QS=q_scale is not None, HAS_KS=k_scale is not None, HAS_VS=v_scale is not None,
        MASK_KIND=mask_kind, CAUSAL=causal != "none", OUT_KIND=out_kind, FAST=fast,
        QK_DT=TL_DTYPE[qk_dt], PV_DT=TL_DTYPE[pv_dt], EVEN_D=dp == d, DP=dp, **cfg,
    )  # fmt: skip


def gluon_attention_into(
    q, k, v, q_scale, k_scale, v_scale, causal, scale, layout, out, out_kind, out_scale, sf=None,
    fast: bool = False,
) -> None:  # fmt: skip
    """Launches the warp-specialised kernel (``gluon_kernel.py``; the call must be
    ``ws_eligible``). An FP8 v is upcast to fp16 first (exact; P·V multiplies 16-bit P and
    V, the default precision), or with ``fast`` copied to ``fast_v_tiles`` (FP8 P·V)."""
    from .gluon_kernel import MAXNREG, ws_attention_kernel

    b, h, sq, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    qv, q_rb, q_rh, q_ch = rows_view(q)
    kv, k_rb, k_rh, k_ch = rows_view(k)
    if fast:
        vv = fast_v_tiles(v).view(b * hkv * d, skv)  # V^T rows (b, h, d)
        v_rb, v_rh, v_ch = hkv * d, d, 0
        v_desc = _descriptor(vv, d, WS_BLOCK_N)
    else:
        if v.dtype == FP8:  # keeps v's strides where they are rows, else contiguous rows
            v = fp8_upcast(v, contiguous=rows_view(v) is None)
        if rows_view(v) is None:
            v = v.contiguous()
        vv, v_rb, v_rh, v_ch = rows_view(v)
        v_desc = _descriptor(vv, WS_BLOCK_N, d)
    nv_k, nv_kbpad = _nvfp4_out(out, sf, out_kind, d)
    if out_kind == 2:
        out = out.view(torch.uint8)
    sm_scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    causal_off = 0 if causal != "bottom_right" else skv - sq
    osc = out_scale if out_kind else out
    scales = (q_scale, k_scale, v_scale)
    bits = sum(1 << i for i, t in enumerate(scales) if t is not None)
    qs, ks, vs = (t if t is not None else osc for t in scales)
    n_work = b * h * (sq // WS_BLOCK_M)
    ws_attention_kernel[(min(n_work, sm_count(q.device)),)](
        _descriptor(qv, 64, d), _descriptor(kv, WS_BLOCK_N, d), v_desc,
        out, osc, qs, ks, vs, bits, h, h // hkv, sq, skv, q_rb, q_rh, q_ch, k_rb, k_rh, k_ch,
        v_rb, v_rh, v_ch, *out_strides(layout, b, h, sq, d),
        sm_scale * 1.4426950408889634, int(causal != "none"), causal_off,
        sf.view(torch.uint8) if sf is not None else out, *nvfp4_row_strides(layout, h, sq, d),
        nv_k, nv_kbpad, n_work, ws_stages(fast, d), num_warps=4, maxnreg=MAXNREG,
    )  # fmt: skip


def _descriptor(view: torch.Tensor, rows: int, cols: int):
    """A TMA descriptor of ``[rows, cols]`` boxes over a 2-D row view (128-byte swizzle)."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    dtype = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16, FP8: gl.float8e4nv}
    layout = gl.NVMMASharedLayout.get_default_for([rows, cols], dtype[view.dtype])
    return TensorDescriptor(view, list(view.shape), list(view.stride()), [rows, cols], layout)


def _transposed(v: torch.Tensor, out: torch.Tensor | None, wgmma_keys: bool, name: str):
    """``transpose_bytes`` of ``v`` (``[B, H, S, D]``) into ``out`` (a contiguous ``[B, H, D,
    S]`` tensor of v's dtype) or a fresh one; returns it."""
    b, h, s, d = v.shape
    if out is None:
        out = torch.empty((b, h, d, s), dtype=v.dtype, device=v.device)
    elif out.shape != (b, h, d, s) or out.dtype != v.dtype or not out.is_contiguous():
        raise ValueError(
            f"{name}: out must be a contiguous {(b, h, d, s)} {v.dtype} tensor, got "
            f"{tuple(out.shape)} {out.dtype}"
        )
    if out.numel():
        x8, y8 = v.view(torch.uint8), out.view(torch.uint8)
        grid = (triton.cdiv(s, 64), triton.cdiv(d, 64), b * h)
        transpose_bytes[grid](x8, y8, h, s, d, *v.stride(), 64, 64, WGMMA_KEYS=wgmma_keys)
    return out


def k_major(v: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``v`` (``[B, H, S, D]``, one-byte elements, D contiguous) as a view of the same shape
    whose memory is ``[B, H, D, S]`` contiguous: a tiled Triton transpose of the raw bytes
    (coalesced on both sides; PyTorch's ``contiguous()`` of the transposed view ran at
    ~0.3 TB/s on the H200) into ``out`` (a contiguous ``[B, H, D, S]`` tensor of v's dtype)
    or a fresh one; stream-ordered, capturable."""
    if v.element_size() != 1 or v.stride(3) != 1:
        raise ValueError(
            f"k_major needs one-byte elements with D contiguous, got {v.dtype}, {v.stride()}"
        )
    return _transposed(v, out, False, "k_major").transpose(-1, -2)


def fast_v_tiles(v: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Fast mode's V for the Gluon kernel: ``v`` (``[B, H, S, D]`` FP8 of any strides, S a
    multiple of 16) as a contiguous ``[B, H, D, S]`` tensor (``out``, or a fresh one) whose
    key ``s`` sits at position ``config.wgmma_key_order(s)``: the K-major tiles FP8 wgmma
    reads for ``P V``, keys in the order of the kernel's FP8 P operand. One byte transpose
    (``transpose_bytes``); stream-ordered, capturable."""
    if v.dtype != FP8 or v.shape[2] % 16:
        raise ValueError(
            f"fast_v_tiles needs float8_e4m3fn with S a multiple of 16, got {v.dtype}, "
            f"S={v.shape[2]}"
        )
    return _transposed(v, out, True, "fast_v_tiles")
