"""The fast mode's format floor: attention with e4m3 probabilities in exact arithmetic
(``attention_fp32(..., fp8_p=True)``), the error any FP8-P kernel starts from."""

from __future__ import annotations

import math

import torch

from graphfuse.ops.attention_ref import attention_fp32
from graphfuse.ops.quant_ref import fp8_static_quant_ref

FP8 = torch.float8_e4m3fn


def _fp8_inputs(gen, b, hq, hkv, sq, skv, d):
    def one(shape):
        return (torch.randn(shape, generator=gen) * 64).to(FP8)

    s = torch.tensor([1 / 64.0])
    return one((b, hq, sq, d)), one((b, hkv, skv, d)), one((b, hkv, skv, d)), s, s, s


def test_fp8_p_rounds_the_probabilities() -> None:
    gen = torch.Generator().manual_seed(0)
    q, k, v, qs, ks, vs = _fp8_inputs(gen, 1, 2, 1, 5, 7, 16)
    out = attention_fp32(q, k, v, qs, ks, vs, compute_dtype=torch.float64, fp8_p=True)
    qf, kf, vf = (t.double() / 64 for t in (q, k, v))
    logits = qf @ kf.transpose(-1, -2).repeat_interleave(2, 1) / math.sqrt(16)
    p = torch.exp(logits - logits.amax(-1, keepdim=True))
    p8 = (p * 256).to(FP8).double() / 256
    want = (p8 @ vf.repeat_interleave(2, 1)) / p.sum(-1, keepdim=True)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    exact = attention_fp32(q, k, v, qs, ks, vs, compute_dtype=torch.float64)
    assert not torch.allclose(out, exact, rtol=1e-4, atol=0)  # the rounding is visible


def test_fp8_p_floor_exceeds_the_numerics_limit() -> None:
    """On the GPU test's fast-mode shape (Sq=200, Skv=130, D=64, FP8 q/k/v) the FP8 output of
    exact e4m3-P attention has an RMSE ratio above the GPU tests' fast-mode 1.25
    (docs/numerics.md allows 1.4) for every seed: the limit is below the format's own floor
    (measured 1.30-1.32, seeds 0-3)."""
    ratios = []
    for seed in range(4):
        gen = torch.Generator().manual_seed(seed)
        args = _fp8_inputs(gen, 1, 2, 2, 200, 130, 64)
        wide = attention_fp32(*args, compute_dtype=torch.float64).float()
        floor = attention_fp32(*args, compute_dtype=torch.float64, fp8_p=True).float()
        s_o = wide.abs().max().reshape(1) / 448
        ref = fp8_static_quant_ref(wide, s_o).float() * s_o
        got = fp8_static_quant_ref(floor, s_o).float() * s_o
        ratios.append(((got - wide).pow(2).mean() / (ref - wide).pow(2).mean()).sqrt().item())
    print("e4m3-P floor RMSE ratios:", [round(r, 3) for r in ratios])
    assert min(ratios) > 1.25, ratios


def test_fp8_p_floor_can_exceed_the_fast_mode_rules() -> None:
    """One of ``tests/gpu/test_attention_ws_gpu.py``'s fast-mode cases (B=2, 8/2 heads,
    Sq=256, Skv=384, D=64, bottom-right causal, q / k / v dequant scales 1/64, 1/128, 1/32):
    exact e4m3-P attention itself misses docs/numerics.md's fast-mode rules (56.7% of FP8
    bytes equal, RMSE 1.44x, worst element 2.9% of the amax; the Gluon kernel measured
    56.7%, 1.44x and 2.9% on an H100), which is why a fast-mode kernel is held to the rules or
    to within 5% / 3 points of this floor, whichever is looser."""
    gen = torch.Generator().manual_seed(962007330)
    q, k, v = ((torch.randn(2, h, s, 64, generator=gen) * 64).to(FP8)
               for h, s in ((8, 256), (2, 384), (2, 384)))  # fmt: skip
    scales = [torch.tensor([f / 64.0]) for f in (1.0, 0.5, 2.0)]
    args = (q, k, v, *scales, None, "bottom_right")
    wide = attention_fp32(*args, compute_dtype=torch.float64).float()
    floor = attention_fp32(*args, compute_dtype=torch.float64, fp8_p=True).float()
    s_o = wide.abs().max().reshape(1) / 448
    ref8, got8 = fp8_static_quant_ref(wide, s_o), fp8_static_quant_ref(floor, s_o)
    equal = (got8.view(torch.uint8) == ref8.view(torch.uint8)).float().mean().item()
    rmse = (got8.float() * s_o - wide).pow(2).mean() / (ref8.float() * s_o - wide).pow(2).mean()
    worst = ((floor - wide).abs().max() / wide.abs().max()).item()
    assert equal < 0.6 and rmse.sqrt().item() > 1.4 and worst > 0.025, (equal, rmse, worst)
