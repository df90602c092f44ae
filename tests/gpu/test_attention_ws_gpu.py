"""The warp-specialised Hopper prefill kernel (``graphfuse/triton/prefill/gluon_kernel.py``) against
the fp64 reference: bf16 / fp16 / FP8 inputs (FP8 with dequant scales, in the default
precision and in fast mode), 16-bit, FP8 and NVFP4 outputs (poisoned first), both input
memory orders, GQA, every causal form, Sq != Skv, custom softmax scales; the calls must
reach it (counted), and it must be capturable in a CUDA graph."""

from __future__ import annotations

import random

import pytest
import torch

import graphfuse  # noqa: F401
from graphfuse.ops.attention_ref import attention_fp32
from graphfuse.ops.quant_ref import fp8_static_quant_ref, nvfp4_quant_ref
from graphfuse.testing.numerics import assert_fp8_close, assert_nvfp4_close

from ._accept import check_fast_worst, check_fp8, fp8_stats

triton = pytest.importorskip("triton")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
        reason="needs an sm_90 GPU",
    ),
]

FP8 = torch.float8_e4m3fn


@pytest.fixture
def ws_calls(monkeypatch):
    """Counts the launches of the warp-specialised kernel."""
    from graphfuse.triton.prefill import launch

    calls = []
    real = launch.gluon_attention_into

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(launch, "gluon_attention_into", counted)
    return calls


def ws_inputs(c: dict):
    """Case ``c``'s q, k, v on CUDA (random, FP8 ones scaled by 64, in its memory layout) and
    their dequant scales (None for 16-bit inputs). ``benchmarks.fast_mode_numerics`` runs the
    same cases."""
    gen = torch.Generator().manual_seed(c["seed"])

    def one(h, s):
        shape = (c["b"], h, s, c["d"]) if c["mem"] == "bhsd" else (c["b"], s, h, c["d"])
        x = torch.randn(shape, generator=gen)
        x = (x * 64 if c["dtype"] == FP8 else x).to(c["dtype"]).cuda()
        return x if c["mem"] == "bhsd" else x.transpose(1, 2)

    q, k, v = one(c["hq"], c["sq"]), one(c["hkv"], c["skv"]), one(c["hkv"], c["skv"])
    if c["dtype"] != FP8:
        return q, k, v, None, None, None
    s = (torch.tensor([1 / 64.0 * f], device="cuda") for f in (1.0, 0.5, 2.0))
    return q, k, v, *s


def ws_cases(n: int, seed: int):
    """``n`` prefill cases (dicts: shapes, dtype, mask, layout, seed) drawn with ``seed``, for
    ``ws_inputs``."""
    rng = random.Random(seed)
    print(f"seed={seed}")
    for _ in range(n):
        hq, hkv = rng.choice([(4, 4), (8, 2)])
        sq, skv = rng.choice([(128, 128), (256, 384), (384, 256), (256, 256)])
        yield dict(
            b=rng.choice([1, 2]),
            hq=hq,
            hkv=hkv,
            sq=sq,
            skv=skv,
            d=rng.choice([64, 128]),
            dtype=rng.choice([torch.bfloat16, torch.float16, FP8]),
            causal=rng.choice(["none", "top_left", "bottom_right"]),
            scale=rng.choice([None, 0.3]),
            mem=rng.choice(["bhsd", "bshd"]),
            layout=rng.choice(["bhsd", "bshd", "bs(hd)"]),
            seed=rng.randrange(1 << 30),
        )


def _nvfp4_out(args: tuple, c: dict, wide: torch.Tensor) -> tuple:
    """The NVFP4 output of ``attention_run(*args)`` written into poisoned buffers (global
    scale from ``wide``'s amax), and the reference's: (packed, scales, ref packed, ref
    scales, global scale)."""
    from graphfuse.ops._attention_args import nvfp4_rows_cols
    from graphfuse.triton.ops import attention_run as run

    m, kk = nvfp4_rows_cols(c["layout"], c["b"], c["hq"], c["sq"], c["d"])
    g = torch.tensor([448 * 6 / wide.abs().max().item()], device="cuda")
    pk = torch.full((m, kk // 2), 0xA5, dtype=torch.uint8, device="cuda")
    sf_shape = ((m + 127) // 128 * 128, (kk // 16 + 3) // 4 * 4)
    sf = torch.full(sf_shape, 0xFF, dtype=torch.uint8, device="cuda").view(FP8)
    run(*args, pk, 2, g, sf)
    rp, rs = nvfp4_quant_ref(wide.reshape(m, kk), g, swizzle=True)
    return pk, sf, rp, rs, g


def _run_case(c: dict, ws_calls: list) -> None:
    from graphfuse.ops._attention_args import out_shape
    from graphfuse.triton.ops import attention_run as run

    q, k, v, qs, ks, vs = ws_inputs(c)
    args = (q, k, v, qs, ks, vs, None, c["causal"], c["scale"], c["layout"], "default")
    wide = attention_fp32(*args, compute_dtype=torch.float64).float()
    shape = out_shape(c["layout"], c["b"], c["hq"], c["sq"], c["d"])
    n0 = len(ws_calls)
    wdt = torch.bfloat16 if c["dtype"] == FP8 else c["dtype"]
    o16 = torch.full(shape, float("nan"), dtype=wdt, device="cuda")
    run(*args, o16, 0)
    err = ((o16.float() - wide).norm() / wide.norm()).item()
    assert not torch.isnan(o16).any() and err < 2e-2, (c, err)
    amax = wide.abs().max().item()
    s_o = torch.tensor([amax / 448.0], device="cuda")
    o8 = torch.full(shape, 0xFF, dtype=torch.uint8, device="cuda").view(FP8)
    run(*args, o8, 1, s_o)
    assert_fp8_close(o8, fp8_static_quant_ref(wide, s_o), wide, s_o, min_equal=0.90)
    op8 = torch.ops.graphfuse.attention_fp8(*args, s_o)  # the op reaches the same kernel
    assert torch.equal(op8.view(torch.uint8), o8.view(torch.uint8))
    pk, sf, rp, rs, g = _nvfp4_out(args, c, wide)
    assert_nvfp4_close(pk, sf, rp, rs, wide, g, min_equal=0.9, rmse_factor=1.1)
    assert len(ws_calls) == n0 + 4, c
    if c["dtype"] == FP8:  # with WS off, FP8 inputs go to the Triton kernel
        run(*args, o8, 1, s_o, config={"WS": False})
        assert len(ws_calls) == n0 + 4


@pytest.mark.parametrize("seed", [0, 1])
def test_ws_matches_reference(seed: int, ws_calls: list) -> None:
    for c in ws_cases(8, seed):
        _run_case(c, ws_calls)


# more row blocks than SMs, so each persistent program takes several (``_item``): causal
# lengths dealt in the snake order, and bottom-right blocks with no key tile at all
MANY_ITEMS = [
    dict(b=2, hq=16, hkv=4, sq=1280, skv=1280, d=128, dtype=torch.bfloat16, causal="top_left"),
    dict(b=2, hq=32, hkv=8, sq=1024, skv=384, d=128, dtype=FP8, causal="bottom_right"),
    dict(b=3, hq=16, hkv=2, sq=768, skv=1024, d=64, dtype=torch.float16, causal="none"),
]


@pytest.mark.parametrize("case", range(len(MANY_ITEMS)))
def test_ws_more_blocks_than_sms(case: int, ws_calls: list) -> None:
    c = dict(MANY_ITEMS[case], scale=None, mem="bshd", layout="bhsd", seed=40 + case)
    n_blocks = c["b"] * c["hq"] * c["sq"] // 128
    assert n_blocks > torch.cuda.get_device_properties(0).multi_processor_count
    _run_case(c, ws_calls)


def test_ws_and_triton_kernel_agree(ws_calls: list) -> None:
    """The same call through both kernels (``WS`` off): 16-bit outputs within rounding."""
    from graphfuse.triton.ops import attention_run as run

    c = next(ws_cases(1, 5))
    c.update(dtype=torch.bfloat16, sq=256, skv=256, causal="top_left", layout="bhsd", mem="bshd")
    q, k, v, _, _, _ = ws_inputs(c)
    args = (q, k, v, None, None, None, None, "top_left", None, "bhsd", "default")
    a = torch.full(q.shape, float("nan"), dtype=q.dtype, device="cuda")
    b = torch.full(q.shape, float("nan"), dtype=q.dtype, device="cuda")
    run(*args, a, 0)
    run(*args, b, 0, config={"WS": False})
    assert len(ws_calls) == 1
    assert (a.float() - b.float()).abs().max().item() < 2e-2 * b.float().abs().max().item()


@pytest.mark.parametrize("precision", ["default", "fast"])
def test_ws_cuda_graph(precision: str, ws_calls: list) -> None:
    """A capture of the Gluon kernel's call (with fast mode's V^T tile copy) replays to the
    bytes of the eager call, over a poisoned output."""
    from graphfuse.triton.ops import attention_run as run

    c = dict(b=1, hq=8, hkv=2, sq=256, skv=256, d=128, dtype=torch.bfloat16, mem="bhsd", seed=3)
    if precision == "fast":
        c.update(dtype=FP8, mem="bshd", seed=9)
    q, k, v, qs, ks, vs = ws_inputs(c)
    args = (q, k, v, qs, ks, vs, None, "top_left", None, "bhsd", precision)
    s_o = torch.tensor([0.01], device="cuda")
    out = torch.empty(q.shape, dtype=FP8, device="cuda")
    run(*args, out, 1, s_o)  # compile outside the capture
    torch.cuda.synchronize()
    expect = out.clone()
    out.view(torch.uint8).fill_(0xFF)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        run(*args, out, 1, s_o)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out.view(torch.uint8), expect.view(torch.uint8))
    assert len(ws_calls) == 2


@pytest.mark.parametrize("first", ["k", "v"])
def test_ws_kv_in_different_memory_orders(first: str, ws_calls: list) -> None:
    """K and V in different memory orders (one ``[B,H,S,D]``, the other ``[B,S,H,D]``): each
    has its own TMA coordinates, same result."""
    from graphfuse.triton.ops import attention_run as run

    base = dict(b=2, hq=8, hkv=2, sq=256, skv=384, d=128, dtype=torch.bfloat16, seed=21)
    q, k, v, _, _, _ = ws_inputs(dict(base, mem="bshd"))
    _, k2, v2, *_ = ws_inputs(dict(base, mem="bhsd", seed=22))
    k, v = (k, v2) if first == "k" else (k2, v)  # ``first`` stays [B,S,H,D], the other not
    args = (q, k, v, None, None, None, None, "bottom_right", None, "bshd", "default")
    wide = attention_fp32(*args, compute_dtype=torch.float64).float()
    out = torch.full(wide.shape, float("nan"), dtype=torch.bfloat16, device="cuda")
    run(*args, out, 0)
    assert len(ws_calls) == 1
    err = ((out.float() - wide).norm() / wide.norm()).item()
    assert not torch.isnan(out).any() and err < 2e-2, err


def test_ws_fp8_default_v_k_major(ws_calls: list) -> None:
    """FP8 q / k / v in the default precision with V stored K-major (``[B, H, D, S]`` memory,
    upcast into contiguous rows by the launcher): the FP8 output's bytes equal those of the
    same V in ``[S, D]`` rows (the kernel sees the same fp16 V), and match the reference."""
    from graphfuse.triton.ops import attention_run as run

    c = dict(b=2, hq=8, hkv=2, sq=256, skv=384, d=128, dtype=FP8, mem="bhsd", seed=23)
    q, k, v, qs, ks, vs = ws_inputs(c)
    v_k_major = v.transpose(-1, -2).contiguous().transpose(-1, -2)
    outs = []
    for vv in (v, v_k_major):
        args = (q, k, vv, qs, ks, vs, None, "top_left", None, "bshd", "default")
        o8 = torch.full((2, 256, 8, 128), 0x7F, dtype=torch.uint8, device="cuda").view(FP8)
        wide = attention_fp32(*args, compute_dtype=torch.float64).float()
        s_o = torch.tensor([wide.abs().max().item() / 448.0], device="cuda")
        run(*args, o8, 1, s_o)
        check_fp8(o8, fp8_static_quant_ref(wide, s_o), wide, s_o.item())
        outs.append(o8.view(torch.uint8))
    assert len(ws_calls) == 2
    assert torch.equal(outs[0], outs[1])


def _run_fast_case(c: dict, ws_calls: list) -> None:
    """Fast mode (FP8 P·V) through the Gluon kernel: docs/numerics.md's fast-mode acceptance
    against the fp64 reference for 16-bit, FP8 and NVFP4 outputs (the rules, or the e4m3
    format floor's figures within 5% / 3 points where the floor itself misses a rule), and
    the 16-bit output close to the Triton kernel's fast mode (the same e4m3 P, another
    summation order)."""
    from graphfuse.ops._attention_args import out_shape
    from graphfuse.triton.ops import attention_run as run

    q, k, v, qs, ks, vs = ws_inputs(c)
    args = (q, k, v, qs, ks, vs, None, c["causal"], c["scale"], c["layout"], "fast")
    wide = attention_fp32(*args, compute_dtype=torch.float64).float()
    amax = wide.abs().max().item()
    # the format's floor: exact arithmetic with e4m3 P (tests/ops/test_fast_mode_floor.py)
    floor = attention_fp32(*args, compute_dtype=torch.float64, fp8_p=True).float()
    shape = out_shape(c["layout"], c["b"], c["hq"], c["sq"], c["d"])
    n0 = len(ws_calls)
    o16 = torch.full(shape, float("nan"), dtype=torch.bfloat16, device="cuda")
    run(*args, o16, 0)
    err = ((o16.float() - wide).norm() / wide.norm()).item()
    assert not torch.isnan(o16).any() and err < 5e-2, (c, err)
    check_fast_worst(o16, wide, floor)
    t16 = torch.full(shape, float("nan"), dtype=torch.bfloat16, device="cuda")
    run(*args, t16, 0, config={"WS": False})
    diff = ((o16.float() - t16.float()).norm() / t16.float().norm()).item()
    assert diff < 2e-2, (c, diff)  # P rounded alike; tiles and summation order differ
    s_o = torch.tensor([amax / 448.0], device="cuda")
    o8 = torch.full(shape, 0xFF, dtype=torch.uint8, device="cuda").view(FP8)
    run(*args, o8, 1, s_o)
    ref8 = fp8_static_quant_ref(wide, s_o)
    fl = fp8_stats(fp8_static_quant_ref(floor, s_o), ref8, wide, s_o.item())
    check_fp8(o8, ref8, wide, s_o.item(), fast=True, floor=fl)
    pk, sf, rp, rs, g = _nvfp4_out(args, c, wide)
    assert_nvfp4_close(
        pk, sf, rp, rs, wide, g, min_equal=0.6, rmse_factor=1.4, max_scale_step=None
    )  # fmt: skip
    assert len(ws_calls) == n0 + 3, c


@pytest.mark.parametrize("seed", [0, 1])
def test_ws_fast_mode(seed: int, ws_calls: list) -> None:
    for c in ws_cases(6, seed):
        _run_fast_case(dict(c, dtype=FP8), ws_calls)


def test_ws_fast_mode_more_blocks_than_sms(ws_calls: list) -> None:
    c = dict(MANY_ITEMS[1], scale=None, mem="bhsd", layout="bshd", seed=47)
    _run_fast_case(c, ws_calls)


def test_fast_v_tiles_key_order() -> None:
    """``fast_v_tiles`` writes V^T with key ``s`` at ``wgmma_key_order(s)`` for both memory
    orders of v and a V stored K-major, every byte of a poisoned output."""
    from graphfuse.triton.prefill.config import wgmma_key_order
    from graphfuse.triton.prefill.launch import fast_v_tiles

    for mem in ("bhsd", "bshd", "k-major"):
        c = dict(b=2, hq=3, hkv=3, sq=128, skv=384, d=64, dtype=FP8, seed=5)
        v = ws_inputs(dict(c, mem="bhsd" if mem == "k-major" else mem))[2]
        if mem == "k-major":
            v = v.transpose(-1, -2).contiguous().transpose(-1, -2)
        got = torch.full(v.transpose(-1, -2).shape, 0xFF, dtype=torch.uint8, device="cuda")
        fast_v_tiles(v, got.view(FP8))
        pos = torch.tensor([wgmma_key_order(s) for s in range(v.shape[2])], device="cuda")
        want = torch.empty_like(got)
        want[..., pos] = v.transpose(-1, -2).view(torch.uint8)
        assert torch.equal(got, want), mem
