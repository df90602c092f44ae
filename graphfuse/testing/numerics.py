"""Acceptance checks of docs/numerics.md ("Fused attention with quantized output") as reusable test
helpers: a fused kernel's quantized output against the unfused reference.

Example (on a GPU, pass ``min_equal=0.90``: its kernels round P to 16 bits):
    >>> import torch, graphfuse
    >>> from graphfuse.ops.attention_ref import attention_fp32
    >>> from graphfuse.ops.quant_ref import fp8_static_quant_ref
    >>> q, k, v = (torch.randn(1, 2, 16, 64, dtype=torch.bfloat16) for _ in range(3))
    >>> args = (q, k, v, None, None, None, None, "top_left", None, "bhsd", "default")
    >>> wide = attention_fp32(*args)
    >>> s_o = wide.abs().amax() / 448
    >>> out = torch.ops.graphfuse.attention_fp8(*args, s_o)
    >>> assert_fp8_close(out, fp8_static_quant_ref(wide, s_o), wide, s_o)
"""

from __future__ import annotations

import torch

from graphfuse.ops.quant_ref import nvfp4_dequant_ref

__all__ = ["assert_fp8_close", "assert_nvfp4_close", "e4m3_ordinal"]

E4M3_NAN = 0x7F


def e4m3_ordinal(b: torch.Tensor) -> torch.Tensor:
    """Position of each e4m3 byte on the number line (±0 -> 0; adjacent codes differ by 1).

    Args:
        b: uint8 or float8_e4m3fn tensor.

    Returns:
        int32 tensor of the same shape (NaN bytes map to ±127).
    """
    u = _bytes(b).to(torch.int32)
    mag = u & 0x7F
    return torch.where(u >= 0x80, -mag, mag)


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t


def _swizzled_offsets(m: int, kb: int) -> torch.Tensor:
    """Flat offsets (docs/numerics.md) of the m x kb block scales in the swizzled layout."""
    n_ktiles = (kb + 3) // 4
    r = torch.arange(m).unsqueeze(1)
    c = torch.arange(kb).unsqueeze(0)
    off = ((r // 128) * n_ktiles + c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4
    return off.reshape(-1)


def _rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).pow(2).mean().sqrt().item() if a.numel() else 0.0


def _describe(mask: torch.Tensor, *tensors: torch.Tensor, limit: int = 5) -> str:
    idx = mask.nonzero()[:limit]
    rows = []
    for i in idx:
        t = tuple(i.tolist())
        rows.append(f"{t}: " + ", ".join(str(x[t].item()) for x in tensors))
    return "; ".join(rows)


def assert_fp8_close(
    out: torch.Tensor,
    ref_bytes: torch.Tensor,
    wide: torch.Tensor,
    out_scale: torch.Tensor,
    *,
    min_equal: float = 0.99,
    rmse_factor: float = 1.1,
) -> None:
    """FP8-out acceptance: bytes within one e4m3 step of the reference (or dequantized values
    within 2⁻⁹·448·s_o), at least ``min_equal`` of the bytes equal, and the dequantized RMSE
    against ``wide`` at most ``rmse_factor`` x the reference-quantized RMSE.

    Args:
        out: the kernel's float8_e4m3fn (or uint8) output.
        ref_bytes: the reference quantized output, same shape and dtype kind.
        wide: the fp32 (or wider) attention output the reference quantized.
        out_scale: s_o, the output's dequant scale (one element).
        min_equal: 0.99 for fp32-accumulating (CPU) kernels, 0.90 for 16-bit-P GPU kernels.
        rmse_factor: 1.1 by default (1.4 for fast mode).

    Raises:
        AssertionError: naming the failing criterion and the first offending elements.
    """
    assert out.shape == ref_bytes.shape, f"shape {list(out.shape)} != {list(ref_bytes.shape)}"
    assert out.shape == wide.shape, f"shape {list(out.shape)} != wide {list(wide.shape)}"
    ob, rb = _bytes(out).cpu(), _bytes(ref_bytes).cpu()
    s = float(out_scale.reshape(()).float())
    deq_o = ob.view(torch.float8_e4m3fn).float() * s
    deq_r = rb.view(torch.float8_e4m3fn).float() * s
    nan_o, nan_r = (ob & 0x7F) == E4M3_NAN, (rb & 0x7F) == E4M3_NAN
    assert torch.equal(nan_o, nan_r), "NaN bytes differ: " + _describe(nan_o != nan_r, ob, rb)
    step = (e4m3_ordinal(ob) - e4m3_ordinal(rb)).abs() <= 1
    near = (deq_o - deq_r).abs() <= 2.0**-9 * 448.0 * s
    bad = ~(step | near | nan_o)
    assert not bad.any(), (
        f"{int(bad.sum())} bytes more than one e4m3 step from the reference "
        "(index: out byte, ref byte): " + _describe(bad, ob, rb)
    )
    if ob.numel():
        eq = (ob == rb).double().mean().item()
        assert eq >= min_equal, f"only {eq:.4%} of bytes equal the reference (need {min_equal})"
    finite = ~nan_o
    w = wide.cpu()
    r_out, r_ref = _rmse(deq_o[finite], w[finite]), _rmse(deq_r[finite], w[finite])
    assert r_out <= rmse_factor * r_ref + 1e-30, (
        f"dequantized RMSE {r_out:.6g} > {rmse_factor} x reference RMSE {r_ref:.6g}"
    )


def assert_nvfp4_close(
    packed: torch.Tensor,
    block_scale: torch.Tensor,
    ref_packed: torch.Tensor,
    ref_block_scale: torch.Tensor,
    wide: torch.Tensor,
    global_scale: torch.Tensor,
    *,
    min_equal: float = 0.99,
    rmse_factor: float = 1.1,
    max_scale_step: int | None = 1,
) -> None:
    """NVFP4-out acceptance: swizzled block-scale bytes within ``max_scale_step`` e4m3 steps
    everywhere (and padding bytes zero), at least ``min_equal`` of them equal, dequantized
    RMSE against ``wide`` (viewed as ``[M, K]``) at most ``rmse_factor`` x the reference's.

    Args:
        packed, block_scale: the kernel's uint8 ``[M, K/2]`` and swizzled e4m3 scales.
        ref_packed, ref_block_scale: the reference's (``nvfp4_quant_ref(wide, g)``).
        wide: the wide attention output (any shape whose last dim is K).
        global_scale: g, the encode global scale.
        min_equal: 0.99 on CPU, 0.90 on GPU.
        rmse_factor: 1.1 by default.
        max_scale_step: 1 by default; None for fast mode, whose error docs/numerics.md bounds
            against the output's absolute maximum, not each block's, so a small block's
            scale can move by more than one step.

    Raises:
        AssertionError: naming the failing criterion.
    """
    assert packed.shape == ref_packed.shape, f"{list(packed.shape)} != {list(ref_packed.shape)}"
    assert block_scale.shape == ref_block_scale.shape, (
        f"{list(block_scale.shape)} != {list(ref_block_scale.shape)}"
    )
    assert packed.dtype == torch.uint8 and block_scale.dtype == torch.float8_e4m3fn
    m, k = packed.shape[0], packed.shape[1] * 2
    sb, rsb = _bytes(block_scale).cpu(), _bytes(ref_block_scale).cpu()
    pad = torch.ones_like(sb, dtype=torch.bool)
    if m and k:
        pad.view(-1)[_swizzled_offsets(m, k // 16)] = False
    assert not sb[pad].any(), f"{int((sb[pad] != 0).sum())} swizzle padding bytes not zero"
    if max_scale_step is not None:
        step = (e4m3_ordinal(sb) - e4m3_ordinal(rsb)).abs() <= max_scale_step
        assert step.all(), (
            f"{int((~step).sum())} block-scale bytes more than {max_scale_step} e4m3 step(s) "
            "from the reference: " + _describe(~step, sb, rsb)
        )
    valid_sb, valid_rsb = sb[~pad], rsb[~pad]
    if valid_sb.numel():
        eq = (valid_sb == valid_rsb).double().mean().item()
        assert eq >= min_equal, f"only {eq:.4%} of block scales equal (need {min_equal})"
    w = wide.reshape(m, k).cpu()
    deq = nvfp4_dequant_ref(packed.cpu(), block_scale.cpu(), global_scale.cpu(), torch.float32)
    deq_r = nvfp4_dequant_ref(
        ref_packed.cpu(), ref_block_scale.cpu(), global_scale.cpu(), torch.float32
    )
    finite = torch.isfinite(deq_r) & torch.isfinite(w)
    r_out, r_ref = _rmse(deq[finite], w[finite]), _rmse(deq_r[finite], w[finite])
    assert r_out <= rmse_factor * r_ref + 1e-30, (
        f"dequantized RMSE {r_out:.6g} > {rmse_factor} x reference RMSE {r_ref:.6g}"
    )
    assert torch.equal(torch.isfinite(deq), torch.isfinite(deq_r)), "non-finite values differ"
