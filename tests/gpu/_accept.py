"""docs/numerics.md acceptance checks for GPU kernel outputs (fused attention FP8 / NVFP4 out).

Each check returns its statistics (so benchmarks can record them) and raises AssertionError
with the numbers when a threshold fails.
"""

from __future__ import annotations

import torch

_FP8 = torch.float8_e4m3fn


def _grid_index(b: torch.Tensor) -> torch.Tensor:
    """Rank of each e4m3 byte's value on the ordered grid of finite e4m3 values (-0 == +0)."""
    mag = (b & 0x7F).to(torch.int64)
    return torch.where((b & 0x80) != 0, -mag, mag)


def fp8_stats(out: torch.Tensor, ref: torch.Tensor, wide: torch.Tensor, s_o: float) -> dict:
    """Statistics of an FP8 output against the reference bytes and the wide output."""
    ob, rb = out.view(torch.uint8), ref.view(torch.uint8)
    of, rf = out.float() * s_o, ref.float() * s_o
    step = (_grid_index(ob) - _grid_index(rb)).abs()
    near = (step <= 1) | ((of - rf).abs() <= 0.875 * s_o)
    w = wide.float()
    rmse = (of - w).pow(2).mean().sqrt().item()
    rmse_ref = (rf - w).pow(2).mean().sqrt().item()
    return {
        "equal": (ob == rb).float().mean().item(),
        "near": near.float().mean().item(),
        "nan": torch.isnan(of).sum().item(),
        "rmse_ratio": rmse / max(rmse_ref, 1e-30),
        "max_err_frac": (of - w).abs().max().item() / max(w.abs().max().item(), 1e-30),
    }


def check_fast_worst(out16: torch.Tensor, wide: torch.Tensor, floor: torch.Tensor) -> None:
    """docs/numerics.md fast mode's worst-element rule on a 16-bit output: no element off by
    more than 2.5% of the output's absolute maximum, or within 5% of the format floor's worst
    element where that is looser. ``floor`` is exact attention with e4m3 P
    (``attention_fp32(..., fp8_p=True)``), rounded here to ``out16``'s dtype: a 16-bit output
    carries that rounding on top of the floor (up to half a bf16 step: 2**-9 for values in
    [0.5, 1))."""
    w = wide.float()
    amax = w.abs().max().item()
    worst = (out16.float() - w).abs().max().item()
    worst_floor = (floor.to(out16.dtype).float() - w).abs().max().item()
    assert worst <= max(0.025 * amax, 1.05 * worst_floor), (worst, worst_floor, amax)


def check_fp8(
    out, ref, wide, s_o: float, *, fast: bool = False, min_equal: float = 0.9,
    floor: dict | None = None,
) -> dict:  # fmt: skip
    """docs/numerics.md FP8-out acceptance (GPU thresholds; ``fast``: the FP8-P rules, or
    within 3 points / 5% of ``floor``'s equal bytes / RMSE ratio where that is looser:
    ``floor`` is ``fp8_stats`` of exact attention with e4m3 P, the format's own error)."""
    st = fp8_stats(out, ref, wide, s_o)
    assert st["nan"] == 0, st
    if fast:
        # (the 2.5%-of-amax rule is checked on the unquantized fast-mode output)
        eq, rmse = 0.6, 1.4
        if floor is not None:
            eq, rmse = min(eq, floor["equal"] - 0.03), max(rmse, 1.05 * floor["rmse_ratio"])
        assert st["equal"] >= eq and st["rmse_ratio"] <= rmse, (st, floor)
    else:
        assert st["near"] == 1.0 and st["equal"] >= min_equal and st["rmse_ratio"] <= 1.1, st
    return st


def nvfp4_stats(packed, sf, ref_packed, ref_sf, wide2d: torch.Tensor, g: torch.Tensor) -> dict:
    """Statistics of an NVFP4 output (swizzled scales) against the reference."""
    from graphfuse.ops.quant_ref import nvfp4_dequant_ref

    sb, rsb = sf.view(torch.uint8), ref_sf.view(torch.uint8)
    step = (_grid_index(sb) - _grid_index(rsb)).abs()
    deq = nvfp4_dequant_ref(packed.cpu(), sf.cpu(), g.cpu(), torch.float32)
    rdeq = nvfp4_dequant_ref(ref_packed.cpu(), ref_sf.cpu(), g.cpu(), torch.float32)
    w = wide2d.float().cpu()
    rmse = (deq - w).pow(2).mean().sqrt().item()
    rmse_ref = (rdeq - w).pow(2).mean().sqrt().item()
    return {
        "scale_equal": (sb == rsb).float().mean().item(),
        "scale_near": (step <= 1).float().mean().item(),
        "packed_equal": (packed == ref_packed).float().mean().item(),
        "nan": torch.isnan(deq).sum().item(),
        "rmse_ratio": rmse / max(rmse_ref, 1e-30),
    }


def check_nvfp4(
    packed, sf, ref_packed, ref_sf, wide2d, g, *, min_equal: float = 0.9, max_rmse: float = 1.1
) -> dict:
    """docs/numerics.md NVFP4-out acceptance (GPU thresholds)."""
    st = nvfp4_stats(packed, sf, ref_packed, ref_sf, wide2d, g)
    assert st["nan"] == 0, st
    assert st["scale_near"] == 1.0 and st["scale_equal"] >= min_equal, st
    assert st["rmse_ratio"] <= max_rmse, st
    return st
