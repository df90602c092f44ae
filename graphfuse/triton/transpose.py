"""K-major copies of FP8 V for the fast-mode P·V product (``attention_config`` knob ``VT``).

FP8 wgmma reads its B operand K-major; for P·V the K dimension is the key index, so V must
have keys contiguous (``[B, H, D, S]`` memory). ``k_major`` writes that copy with a tiled
Triton transpose of the raw bytes (coalesced on both sides; PyTorch's ``contiguous()`` of
the transposed view ran at ~0.3 TB/s on the H200).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _transpose_bytes(X, Y, H, S, D, sxb, sxh, sxs, BS: tl.constexpr, BD: tl.constexpr):
    """``Y[b, h, d, s] = X[b, h, s, d]`` (bytes; Y contiguous ``[B, H, D, S]``)."""
    bh = tl.program_id(2).to(tl.int64)
    b = bh // H
    h = bh % H
    offs_s = tl.program_id(0) * BS + tl.arange(0, BS)
    offs_d = tl.program_id(1) * BD + tl.arange(0, BD)
    m = (offs_s[:, None] < S) & (offs_d[None, :] < D)
    tile = tl.load(X + b * sxb + h * sxh + offs_s[:, None] * sxs + offs_d[None, :], mask=m)
    out = Y + bh * D * S + offs_d[:, None] * S + offs_s[None, :]
    tl.store(out, tl.trans(tile), mask=tl.trans(m))


def k_major(v: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``v`` (``[B, H, S, D]``, one-byte elements, D contiguous) as a view of the same shape
    whose memory is ``[B, H, D, S]`` contiguous (a copy into ``out``, a contiguous
    ``[B, H, D, S]`` tensor of v's dtype, or a fresh one; stream-ordered, capturable)."""
    b, h, s, d = v.shape
    if v.element_size() != 1 or v.stride(3) != 1:
        raise ValueError(
            f"k_major needs one-byte elements with D contiguous, got {v.dtype}, {v.stride()}"
        )
    if out is None:
        out = torch.empty((b, h, d, s), dtype=v.dtype, device=v.device)
    elif out.shape != (b, h, d, s) or out.dtype != v.dtype or not out.is_contiguous():
        raise ValueError(
            f"k_major: out must be a contiguous {(b, h, d, s)} {v.dtype} tensor, got "
            f"{tuple(out.shape)} {out.dtype}"
        )
    if out.numel():
        x8, y8 = v.view(torch.uint8), out.view(torch.uint8)
        grid = (triton.cdiv(s, 64), triton.cdiv(d, 64), b * h)
        _transpose_bytes[grid](x8, y8, h, s, d, v.stride(0), v.stride(1), v.stride(2), 64, 64)
    return out.transpose(-1, -2)
