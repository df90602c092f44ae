"""Triton fused attention (dense prefill / decode) against the fp32 reference, NUMERICS.md
acceptance, poisoned outputs, CUDA-graph capture and opcheck."""

from __future__ import annotations

import random

import pytest
import torch

import graphfuse  # noqa: F401
import graphfuse.triton  # noqa: F401  (CUDA impls; until graphfuse/__init__ imports it)
from graphfuse.ops.attention_ref import attention_fp32
from graphfuse.ops.quant_ref import fp8_static_quant_ref, nvfp4_quant_ref
from graphfuse.testing_numerics import assert_fp8_close, assert_nvfp4_close

from ._accept import check_fp8

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

FP8 = torch.float8_e4m3fn


def make_inputs(b, hq, hkv, sq, skv, d, dtype, gen: torch.Generator):
    """Fresh random q, k, v (and dequant scales for FP8) on CUDA."""

    def one(shape):
        x = torch.randn(shape, generator=gen)
        if dtype == FP8:
            return (x * 64).to(FP8).cuda(), torch.tensor([1 / 64.0], device="cuda")
        return x.to(dtype).cuda(), None

    (q, qs), (k, ks), (v, vs) = one((b, hq, sq, d)), one((b, hkv, skv, d)), one((b, hkv, skv, d))
    return q, k, v, qs, ks, vs


def make_mask(kind: str, b, hq, sq, skv, gen: torch.Generator):
    if kind == "none":
        return None
    if kind == "bool":
        m = torch.rand((b, 1, sq, skv), generator=gen) > 0.3
        m[:, :, 0] = False  # a fully masked row must give zeros
        return m.cuda()
    return (torch.randn((1, hq, sq, skv), generator=gen) * 2).cuda()


def _cases(n: int, seed: int):
    rng = random.Random(seed)
    print(f"seed={seed}")
    for _ in range(n):
        hq, hkv = rng.choice([(4, 4), (8, 2), (6, 3)])
        sq, skv = rng.choice([(1, 300), (1, 64), (77, 77), (130, 200), (200, 130), (256, 256)])
        yield dict(
            b=rng.choice([1, 2]),
            hq=hq,
            hkv=hkv,
            sq=sq,
            skv=skv,
            d=rng.choice([64, 128, 80]),
            dtype=rng.choice([FP8, FP8, torch.bfloat16, torch.float16]),
            causal=rng.choice(["none", "top_left", "bottom_right"]),
            mask=rng.choice(["none", "none", "bool", "add"]),
            layout=rng.choice(["bhsd", "bshd", "bs(hd)", "(bs)(hd)"]),
            seed=rng.randrange(1 << 30),
        )


def run_case(c: dict, precision: str = "default") -> None:
    """Checks one case in all three output formats (poisoned outputs)."""
    from graphfuse.ops._attention_args import nvfp4_rows_cols, out_shape
    from graphfuse.triton.attention_ops import run

    gen = torch.Generator().manual_seed(c["seed"])
    b, hq, sq, d = c["b"], c["hq"], c["sq"], c["d"]
    q, k, v, qs, ks, vs = make_inputs(b, hq, c["hkv"], sq, c["skv"], d, c["dtype"], gen)
    mask = make_mask(c["mask"], b, hq, sq, c["skv"], gen)
    args = (q, k, v, qs, ks, vs, mask, c["causal"], None, c["layout"], precision)
    wide = attention_fp32(*args, compute_dtype=torch.float64).float()
    amax = max(wide.abs().max().item(), 1e-6)
    shape = out_shape(c["layout"], b, hq, sq, d)
    # 16-bit output
    o16 = torch.full(shape, float("nan"), dtype=torch.bfloat16, device="cuda")
    run(*args, o16, 0)
    err = ((o16.float() - wide).norm() / wide.norm().clamp_min(1e-30)).item()
    fast = precision == "fast" and c["dtype"] == FP8
    # 16-bit probabilities: ~1e-2 relative; FP8 probabilities (fast): ~2-3e-2
    assert not torch.isnan(o16).any() and err < (5e-2 if fast else 2e-2), (c, err)
    if fast:  # NUMERICS.md fast mode: no element of the unquantized output off by > 2.5% amax
        max_err = (o16.float() - wide).abs().max().item()
        assert max_err <= 0.025 * amax, (c, max_err, amax)
    # FP8 output
    s_o = torch.tensor([amax / 448.0], device="cuda")
    o8 = torch.full(shape, 0xFF, dtype=torch.uint8, device="cuda").view(FP8)
    run(*args, o8, 1, s_o)
    ref8 = fp8_static_quant_ref(wide, s_o)
    if fast:
        check_fp8(o8, ref8, wide, s_o.item(), fast=True)
    else:
        assert_fp8_close(o8, ref8, wide, s_o, min_equal=0.90)
    op8 = torch.ops.graphfuse.attention_fp8(*args, s_o)
    assert torch.equal(op8.view(torch.uint8), o8.view(torch.uint8))
    # NVFP4 output
    if d % 16 == 0:
        m, kk = nvfp4_rows_cols(c["layout"], b, hq, sq, d)
        g = torch.tensor([448 * 6 / amax], device="cuda")
        pk = torch.full((m, kk // 2), 0xA5, dtype=torch.uint8, device="cuda")
        sf = torch.full(
            ((m + 127) // 128 * 128, (kk // 16 + 3) // 4 * 4),
            0xFF,
            dtype=torch.uint8,
            device="cuda",
        ).view(FP8)
        run(*args, pk, 2, g, sf)
        rp, rs = nvfp4_quant_ref(wide.reshape(m, kk), g, swizzle=True)
        assert_nvfp4_close(
            pk,
            sf,
            rp,
            rs,
            wide,
            g,
            min_equal=0.6 if fast else 0.9,
            rmse_factor=1.25 if fast else 1.1,
        )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_attention_matches_reference(seed: int) -> None:
    for c in _cases(6, seed):
        run_case(c)


@pytest.mark.xfail(
    reason="known gap (H200, 2026-12-02): fast mode (FP8 P) measured 61.4% equal bytes and "
    "RMSE ratio 1.30 on seed 3, over NUMERICS.md's 1.25; see docs/gpu.md",
    strict=False,
)
@pytest.mark.parametrize("seed", [3])
def test_attention_fast_mode(seed: int) -> None:
    for c in _cases(6, seed):
        c["dtype"] = FP8
        run_case(c, precision="fast")


def test_attention_wide_dtypes() -> None:
    gen = torch.Generator().manual_seed(7)
    for dt in (torch.float32, torch.float16):
        q, k, v, qs, ks, vs = make_inputs(1, 4, 2, 50, 70, 64, dt, gen)
        args = (q, k, v, qs, ks, vs, None, "top_left", 0.3, "bshd", "default")
        out = torch.ops.graphfuse.attention(*args, torch.float32)
        ref = attention_fp32(*args, compute_dtype=torch.float64).float()
        assert ((out - ref).norm() / ref.norm()).item() < (1e-5 if dt == torch.float32 else 2e-3)


def test_attention_cuda_graph() -> None:
    gen = torch.Generator().manual_seed(11)
    q, k, v, qs, ks, vs = make_inputs(2, 8, 2, 128, 128, 128, FP8, gen)
    s_o = torch.tensor([0.01], device="cuda")
    args = (q, k, v, qs, ks, vs, None, "top_left", None, "bs(hd)", "default")
    ops = torch.ops.graphfuse
    ops.attention_fp8(*args, s_o)
    ops.attention_nvfp4(*args, s_o)
    dq = q[:, :, :1].clone()
    dargs = (dq, k, v, qs, ks, vs, None, "bottom_right", None, "bhsd", "default")
    ops.attention_fp8(*dargs, s_o)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o8 = ops.attention_fp8(*args, s_o)
        p4, s4 = ops.attention_nvfp4(*args, s_o)
        d8 = ops.attention_fp8(*dargs, s_o)
    q2, k2, v2, *_ = make_inputs(2, 8, 2, 128, 128, 128, FP8, gen)
    q.copy_(q2), k.copy_(k2), v.copy_(v2), dq.copy_(q2[:, :, :1])
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(o8.view(torch.uint8), ops.attention_fp8(*args, s_o).view(torch.uint8))
    assert torch.equal(p4, ops.attention_nvfp4(*args, s_o)[0])
    assert torch.equal(d8.view(torch.uint8), ops.attention_fp8(*dargs, s_o).view(torch.uint8))


def test_attention_opcheck_cuda() -> None:
    gen = torch.Generator().manual_seed(5)
    q, k, v, qs, ks, vs = make_inputs(1, 4, 2, 32, 48, 64, torch.bfloat16, gen)
    s = torch.tensor([0.01], device="cuda")
    args = (q, k, v, qs, ks, vs, None, "top_left", None, "bshd", "default")
    ops = torch.ops.graphfuse
    utils = ("test_schema", "test_autograd_registration", "test_faketensor")
    torch.library.opcheck(ops.attention.default, (*args, torch.bfloat16), test_utils=utils)
    torch.library.opcheck(ops.attention_fp8.default, (*args, s), test_utils=utils)
    torch.library.opcheck(ops.attention_nvfp4.default, (*args, s * 1e4), test_utils=utils)
