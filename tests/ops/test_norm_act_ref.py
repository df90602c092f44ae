"""The references of the fused norm / activation + quant ops against the unfused graphs they
replace, run eagerly (docs/numerics.md acceptance: FP8 bytes within one e4m3 step and 99.9%
equal; NVFP4 block scales within one step, RMSE at most 1.05x; the residual bit-equal)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from graphfuse.ops import norm_act_ref as R
from graphfuse.ops.quant_ref import nvfp4_dequant_ref, unswizzle_block_scales
from graphfuse.testing.numerics import e4m3_ordinal

FP8 = torch.float8_e4m3fn
FLOATS = [torch.float32, torch.bfloat16, torch.float16]


def eager_fp8(y: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return (y.float() / s).clamp(-448, 448).to(FP8)


def llama_rms_norm(x, w, eps):
    """transformers' LlamaRMSNorm.forward."""
    dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps)
    return w * h.to(dtype)


def assert_fp8_accepted(got: torch.Tensor, want: torch.Tensor, min_equal: float = 0.999) -> None:
    off = (e4m3_ordinal(got) - e4m3_ordinal(want)).abs()
    assert int(off.max()) <= 1, "an FP8 byte is more than one e4m3 step off"
    equal = (got.view(torch.uint8) == want.view(torch.uint8)).double().mean().item()
    assert equal >= min_equal, f"{equal:.5f} of FP8 bytes equal"


def assert_nvfp4_accepted(got, want, g, wide) -> None:
    m, k = got[0].shape[0], got[0].shape[1] * 2
    sg = unswizzle_block_scales(got[1], m, k // 16)
    sw = unswizzle_block_scales(want[1], m, k // 16)
    assert int((e4m3_ordinal(sg) - e4m3_ordinal(sw)).abs().max()) <= 1

    def rmse(p):
        return (nvfp4_dequant_ref(p[0], p[1], g, torch.float32) - wide).pow(2).mean().sqrt()

    assert rmse(got) <= 1.05 * rmse(want) + 1e-12


@pytest.mark.parametrize("dtype", FLOATS)
def test_rms_norm_references_match_the_eager_graphs(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(5)
    x = (torch.randn(256, 1024, generator=gen) * 3).to(dtype)
    res = torch.randn(256, 1024, generator=gen).to(dtype)
    w = (torch.rand(1024, generator=gen) + 0.5).to(dtype)
    s, g = torch.tensor(0.01), torch.tensor(448 * 6 / 8.0)
    h = x + res
    hf = llama_rms_norm(h, w, 1e-6)
    got, got_h = R.add_rms_norm_quant_fp8_ref(x, res, w, 1e-6, s)
    assert torch.equal(got_h, h)
    assert_fp8_accepted(got, eager_fp8(hf, s))
    # aten.rms_norm multiplies by the weight in fp32 before rounding to x's dtype
    aten_norm = F.rms_norm(x, (1024,), w, 1e-6)
    assert_fp8_accepted(
        R.rms_norm_quant_fp8_ref(x, w, 1e-6, s, weight_first=True), eager_fp8(aten_norm, s)
    )
    packed = R.rms_norm_quant_nvfp4_ref(h, w, 1e-6, g)
    wide = hf.float().reshape(-1, 1024)
    assert_nvfp4_accepted(packed, R.nvfp4_quant_ref(hf, g), g, wide)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
def test_act_references_match_the_eager_graphs(dtype: torch.dtype, activation: str) -> None:
    gen = torch.Generator().manual_seed(6)
    gate = (torch.randn(512, 512, generator=gen) * 3).to(dtype)
    up = torch.randn(512, 512, generator=gen).to(dtype)
    act = F.silu(gate) if activation == "silu" else F.gelu(gate, approximate="tanh")
    y = act * up
    s, g = torch.tensor(0.02), torch.tensor(448 * 6 / 10.0)
    assert_fp8_accepted(R.act_and_mul_quant_fp8_ref(gate, up, s, activation), eager_fp8(y, s))
    got = R.act_and_mul_quant_nvfp4_ref(gate, up, g, activation)
    assert_nvfp4_accepted(got, R.nvfp4_quant_ref(y, g), g, y.float())


def test_exp_reference_is_within_two_ulps() -> None:
    v = torch.linspace(-87, 88, 200_001, dtype=torch.float32)
    got, want = R.exp_ref(v).double(), torch.exp(v.double())
    ulp = torch.finfo(torch.float32).eps * want
    assert ((got - want).abs() <= 2 * ulp).all()
    special = R.exp_ref(torch.tensor([float("nan"), float("inf"), -float("inf"), 100.0, -200.0]))
    assert special[0].isnan() and special[1] == float("inf") and special[3] == float("inf")
    assert special[2] == 0 and special[4] == 0
