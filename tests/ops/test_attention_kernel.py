"""The native CPU kernels of graphfuse::attention{,_fp8,_nvfp4} against the pure-PyTorch
reference (docs/numerics.md tolerances), over a seeded sample of the grid plus fixed edge cases.

Every run poisons the outputs (GRAPHFUSE_POISON_OUTPUTS=1 fills them with 0xFF bytes before
the kernel runs), so an element the kernel does not write fails the comparison.
"""

from __future__ import annotations

import os

import pytest
import torch

import graphfuse  # noqa: F401
from graphfuse.ops.attention_ref import attention_fp32
from graphfuse.ops.quant_ref import fp8_static_quant_ref, nvfp4_quant_ref
from graphfuse.testing.numerics import assert_fp8_close, assert_nvfp4_close

from .attention_cases import Case, full_grid, make_inputs, sample_grid

pytestmark = pytest.mark.skipif(
    not graphfuse.ops.native_available(), reason="graphfuse._C not built"
)
OPS = torch.ops.graphfuse
SEED = int(os.environ.get("GRAPHFUSE_TEST_SEED", "20240611"))
N_SAMPLED = 40


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    monkeypatch.setenv("GRAPHFUSE_POISON_OUTPUTS", "1")


def _wide_dtype(inputs: str) -> torch.dtype:
    return {"f32": torch.float32, "f16": torch.float16}.get(inputs, torch.bfloat16)


def check_case(case: Case, seed: int = 0) -> None:
    """Run the op for ``case`` on fresh inputs and apply the docs/numerics.md acceptance."""
    gen = torch.Generator().manual_seed(seed)
    kw = make_inputs(case, gen)
    wide = attention_fp32(**kw)
    args = list(kw.values())
    amax = max(wide.abs().max().item(), 1e-6)
    if case.output == "fp8":
        s_o = torch.tensor([amax / 448.0 * (0.6 + torch.rand((), generator=gen).item())])
        out = OPS.attention_fp8(*args, s_o)
        assert out.dtype == torch.float8_e4m3fn and out.shape == wide.shape
        assert_fp8_close(out, fp8_static_quant_ref(wide, s_o), wide, s_o)
    elif case.output == "nvfp4":
        g = torch.tensor(448.0 * 6.0 / amax * (0.6 + torch.rand((), generator=gen).item()))
        packed, sf = OPS.attention_nvfp4(*args, g)
        ref_packed, ref_sf = nvfp4_quant_ref(wide, g)
        assert_nvfp4_close(packed, sf, ref_packed, ref_sf, wide, g)
    else:
        dt = _wide_dtype(case.inputs)
        out = OPS.attention(*args, dt)
        assert out.dtype == dt and out.shape == wide.shape
        tol = {torch.float32: 2e-5, torch.bfloat16: 2**-7, torch.float16: 2**-10}[dt]
        torch.testing.assert_close(out.float(), wide, rtol=tol, atol=tol * amax)


def test_sampled_grid():
    cases = sample_grid(SEED, N_SAMPLED)
    print(f"\nattention grid sample: seed={SEED} (GRAPHFUSE_TEST_SEED overrides)")
    for i, case in enumerate(cases):
        print(f"  {case}")
        check_case(case, seed=SEED + i)


EDGE_CASES = [
    Case("bf16", "fp8", 1, "none", 1, 1, 64, "bhsd"),  # one key
    Case("fp8", "fp8", 4, "bool", 7, 33, 64, "bs(hd)", batch=2, hkv=2),  # fully masked rows
    Case("fp8kv", "nvfp4", 5, "additive", 7, 33, 128, "(bs)(hd)"),  # -inf rows
    Case("f32", "wide", 8, "bottom_right", 128, 33, 64, "bshd"),  # Sq > Skv: leading zeros
    Case("f16", "fp8", 1, "top_left", 128, 33, 128, "bhsd"),  # Sq > Skv, top-left
    Case("bf16", "nvfp4", 4, "bottom_right", 7, 2048, 128, "bs(hd)"),  # decode-like chunk
    Case("fp8", "wide", 5, "top_left", 1000, 1, 64, "bshd"),
    Case("fp8kv", "fp8", 8, "none", 1, 2048, 128, "(bs)(hd)", batch=2, hkv=2),  # decode
]


@pytest.mark.parametrize("case", EDGE_CASES, ids=str)
def test_edge_cases(case):
    check_case(case, seed=7)


@pytest.mark.slow
@pytest.mark.parametrize("case", full_grid(), ids=str)
def test_full_grid(case):
    check_case(case, seed=11)


def _small(dtype=torch.bfloat16, d=64, hq=4, hkv=2, sq=9, skv=40):
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, hq, sq, d, generator=gen).to(dtype)
    k = torch.randn(2, hkv, skv, d, generator=gen).to(dtype)
    v = torch.randn(2, hkv, skv, d, generator=gen).to(dtype)
    return q, k, v


@pytest.mark.parametrize("d", [20, 72, 80])
def test_odd_head_dims_wide_and_fp8(d):
    q, k, v = _small(d=d)
    args = (q, k, v, None, None, None, None, "top_left", 0.3, "bs(hd)", "default")
    wide = attention_fp32(*args)
    out = OPS.attention(*args, torch.float32)
    torch.testing.assert_close(out, wide, rtol=2e-5, atol=2e-5)
    s_o = torch.tensor(wide.abs().max().item() / 400)
    assert_fp8_close(OPS.attention_fp8(*args, s_o), fp8_static_quant_ref(wide, s_o), wide, s_o)


def test_noncontiguous_inputs_and_scaled_16bit():
    q, k, v = _small()
    qt = q.transpose(1, 2).contiguous().transpose(1, 2)  # [B, S, H, D] storage
    kt = k.transpose(2, 3).contiguous().transpose(2, 3)  # stride(3) != 1
    ks, vs = torch.tensor(0.7), torch.tensor([[1.3]], dtype=torch.float64)
    args = (qt, kt, v, None, ks, vs, None, "bottom_right", None, "bhsd", "default")
    wide = attention_fp32(*args)
    torch.testing.assert_close(OPS.attention(*args, torch.float32), wide, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize(
    "mask_shape,dtype",
    [
        ((9, 40), torch.bool),
        ((2, 1, 1, 40), torch.float16),
        ((1, 4, 9, 1), torch.float64),
        ((40,), torch.bfloat16),
    ],
)
def test_mask_broadcast_and_dtypes(mask_shape, dtype):
    q, k, v = _small()
    gen = torch.Generator().manual_seed(5)
    mask = torch.rand(mask_shape, generator=gen)
    mask = mask > 0.4 if dtype == torch.bool else (mask * 3 - 1).to(dtype)
    args = (q, k, v, None, None, None, mask, "none", None, "bshd", "default")
    wide = attention_fp32(*args)
    torch.testing.assert_close(OPS.attention(*args, torch.float32), wide, rtol=2e-5, atol=2e-5)


def test_fast_precision_matches_default():
    q, k, v = _small()
    s = torch.tensor(0.01)
    a = OPS.attention_fp8(q, k, v, None, None, None, None, "none", None, "bhsd", "default", s)
    b = OPS.attention_fp8(q, k, v, None, None, None, None, "none", None, "bhsd", "fast", s)
    assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def test_fully_masked_rows_are_zero():
    q, k, v = _small()
    mask = torch.ones(9, 40, dtype=torch.bool)
    mask[3] = False
    out = OPS.attention(
        q, k, v, None, None, None, mask, "none", None, "bhsd", "default", torch.float32
    )
    assert torch.isfinite(out).all()
    assert (out[:, :, 3] == 0).all() and (out[:, :, 2] != 0).any()


def _base():
    q, k, v = _small()
    return dict(
        q=q,
        k=k,
        v=v,
        q_scale=None,
        k_scale=None,
        v_scale=None,
        attn_mask=None,
        causal="none",
        scale=None,
        layout="bhsd",
        precision="default",
    )


@pytest.mark.parametrize(
    "change,match",
    [
        (dict(causal="upper"), "unknown causal 'upper'"),
        (dict(layout="sbhd"), "unknown layout 'sbhd'"),
        (dict(precision="fp8"), "unknown precision 'fp8'"),
        (
            dict(k=torch.randn(2, 3, 40, 64), v=torch.randn(2, 3, 40, 64)),
            "Hq=4 must be a multiple of Hkv=3",
        ),
        (dict(attn_mask=torch.ones(9, 41, dtype=torch.bool)), "not broadcastable"),
        (dict(k=torch.randn(2, 2, 40, 64).to(torch.float8_e4m3fn)), "k_scale is None"),
        (dict(q=torch.randn(2, 4, 9, 64).to(torch.float64)), "unsupported q dtype"),
        (dict(k_scale=torch.tensor([1.0, 2.0])), "exactly one element"),
        (dict(v_scale=torch.tensor(-1.0)), "finite and > 0"),
        (dict(v=torch.randn(2, 2, 41, 64)), "same shape"),
    ],
)
def test_errors_name_the_op(change, match):
    kw = {**_base(), **change}
    with pytest.raises(RuntimeError, match=f"graphfuse::attention_fp8: .*{match}"):
        OPS.attention_fp8(*kw.values(), torch.tensor(1.0))


def test_nvfp4_head_dim_error_and_wide_dtype_error():
    q, k, v = _small(d=72)
    args = (q, k, v, None, None, None, None, "none", None, "bs(hd)", "default")
    with pytest.raises(RuntimeError, match="graphfuse::attention_nvfp4: .*D % 16 == 0, got D=72"):
        OPS.attention_nvfp4(*args, torch.tensor(1.0))
    with pytest.raises(RuntimeError, match="graphfuse::attention: unsupported out_dtype"):
        OPS.attention(*args, torch.float64)


@pytest.mark.parametrize("sq,ratio", [(1, 4), (1, 8), (9, 1)])  # direct and tiled K/V paths
def test_every_e4m3_code_as_input(sq, ratio):
    codes = torch.arange(256, dtype=torch.int32)
    codes = codes[(codes & 0x7F) != 0x7F].to(torch.uint8)  # the 254 non-NaN codes
    gen = torch.Generator().manual_seed(9)
    k8 = codes[torch.randperm(254, generator=gen)][:128].reshape(1, 1, 2, 64)
    k8 = torch.cat([k8, codes[:128].reshape(1, 1, 2, 64)], dim=2).view(torch.float8_e4m3fn)
    v8 = codes[-128:].reshape(1, 1, 2, 64).repeat(1, 1, 2, 1).view(torch.float8_e4m3fn)
    q = torch.randn(1, ratio, sq, 64, generator=gen) * 1e-3
    one = torch.tensor(1.0 / 64)
    args = (q, k8, v8, None, one, one, None, "none", None, "bhsd", "default")
    torch.testing.assert_close(
        OPS.attention(*args, torch.float32), attention_fp32(*args), rtol=2e-5, atol=1e-5
    )
