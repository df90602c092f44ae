"""Minimal docs/numerics.md acceptance checks for the fused-attention rule tests.

These local checks implement the "Fused attention with quantized output" acceptance rules
and predate the shared helpers (``graphfuse.testing.numerics``, other signatures), which
could replace them.
"""

from __future__ import annotations

import torch
from torch import Tensor

from graphfuse.ops.quant_ref import nvfp4_dequant_ref, unswizzle_block_scales

FP8 = torch.float8_e4m3fn


def _code(t: Tensor) -> Tensor:
    """Signed e4m3 code index (sign-magnitude byte -> integer line), so adjacent values
    differ by 1 (0x00 and 0x80 both map to 0)."""
    b = t.view(torch.uint8).to(torch.int32)
    mag = b & 0x7F
    return torch.where(b & 0x80 != 0, -mag, mag)


def assert_fp8_close(got: Tensor, want: Tensor, s_o: float, min_equal: float = 0.99) -> float:
    """Every byte within one e4m3 step of ``want`` (or its dequantized value within
    ``0.875 * s_o``), and at least ``min_equal`` of the bytes equal. Returns the fraction
    equal. No NaN byte may appear where ``want`` has none.

    Args:
        got, want: float8_e4m3fn tensors of one shape.
        s_o: the output's dequant scale.
        min_equal: docs/numerics.md's 0.99 for fp32-accumulating CPU kernels against an fp32
            reference; callers comparing against a 16-bit original pass a lower bound and
            say why.
    """
    assert got.dtype == FP8 and want.dtype == FP8, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    g, w = got.float(), want.float()
    assert not (g.isnan() & ~w.isnan()).any(), "the fused output has NaN bytes"
    step_ok = (_code(got) - _code(want)).abs() <= 1
    value_ok = (g - w).abs() * s_o <= 0.875 * s_o  # dequantized values within 2^-9 * 448 * s_o
    bad = ~(step_ok | value_ok)
    assert not bad.any(), f"{int(bad.sum())} bytes more than one e4m3 step off"
    equal = (got.view(torch.uint8) == want.view(torch.uint8)).float().mean().item()
    assert equal >= min_equal, f"only {equal:.4f} of FP8 bytes equal (need {min_equal})"
    return equal


def rmse(a: Tensor, b: Tensor) -> float:
    return (a.double() - b.double()).pow(2).mean().sqrt().item()


def assert_fp8_rmse(got: Tensor, ref: Tensor, wide: Tensor, s_o: float) -> None:
    """Dequantized RMSE of ``got`` against the wide output at most 1.1x the reference's."""
    r_got, r_ref = rmse(got.float() * s_o, wide), rmse(ref.float() * s_o, wide)
    assert r_got <= 1.1 * r_ref + 1e-12, f"RMSE {r_got} > 1.1 x reference {r_ref}"


def assert_nvfp4_close(
    got: tuple[Tensor, Tensor],
    want: tuple[Tensor, Tensor],
    g: Tensor,
    wide: Tensor | None = None,
    min_equal: float = 0.99,
) -> None:
    """NVFP4 acceptance: block-scale bytes within one e4m3 step, ``min_equal`` of them
    equal; dequantized RMSE against ``wide`` (if given) at most 1.1x the reference's.

    Args:
        got, want: (packed [M, K/2], swizzled block scales) pairs.
        g: the encode global scale.
        wide: the fp32 attention output as [M, K], or None.
    """
    m, k = got[0].shape[0], got[0].shape[1] * 2
    assert got[0].shape == want[0].shape and got[1].shape == want[1].shape
    sg = unswizzle_block_scales(got[1], m, k // 16)
    sw = unswizzle_block_scales(want[1], m, k // 16)
    assert_fp8_close(sg, sw, s_o=0.0, min_equal=min_equal)
    if wide is not None:
        dg = nvfp4_dequant_ref(got[0], got[1], g, torch.float32)
        dw = nvfp4_dequant_ref(want[0], want[1], g, torch.float32)
        r_got, r_ref = rmse(dg, wide), rmse(dw, wide)
        assert r_got <= 1.1 * r_ref + 1e-12, f"NVFP4 RMSE {r_got} > 1.1 x reference {r_ref}"
