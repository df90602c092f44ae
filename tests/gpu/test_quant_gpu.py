"""Triton quant kernels against the pure-PyTorch references: bit-exact, poisoned outputs."""

from __future__ import annotations

import random

import pytest
import torch

import graphfuse  # noqa: F401
import graphfuse.triton  # noqa: F401  (CUDA impls; until graphfuse/__init__ imports it)
from graphfuse.ops import quant_ref as R

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def _specials(x: torch.Tensor) -> torch.Tensor:
    flat = x.view(-1)
    n = flat.numel()
    vals = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-40, -3e-39, 1e30, 6e-3]
    for i, v in enumerate(vals):
        if n > 4 * i + 1:
            flat[(7 * i + 3) % n] = v
    return x


def _rand(shape, dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * torch.exp(torch.randn(shape, generator=g) * 3)
    return _specials(x).to(dtype).cuda()


def _same_fp8(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bytes equal, where a NaN byte may be either 0x7F or 0xFF (docs/numerics.md)."""
    a, b = a.view(torch.uint8).cpu(), b.view(torch.uint8).cpu()
    nan_a, nan_b = (a & 0x7F) == 0x7F, (b & 0x7F) == 0x7F
    return bool(torch.equal(nan_a, nan_b) and torch.equal(a[~nan_a], b[~nan_b]))


def _same_float(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-equal except that any NaN matches any NaN."""
    a, b = a.cpu(), b.cpu()
    na, nb = torch.isnan(a), torch.isnan(b)
    return bool(
        torch.equal(na, nb)
        and torch.equal(a[~na].float(), b[~nb].float())
        and torch.equal(torch.signbit(a[~na]), torch.signbit(b[~nb]))
    )


def _cases(n: int, seed: int):
    rng = random.Random(seed)
    print(f"seed={seed}")
    for _ in range(n):
        m = rng.choice([0, 1, 3, 127, 128, 129, 300])
        k = 16 * rng.choice([1, 2, 3, 5, 8, 64])
        dt = rng.choice([torch.float32, torch.bfloat16, torch.float16])
        yield m, k, dt, rng.randrange(1 << 30)


@pytest.mark.parametrize("seed", [0, 1])
def test_fp8_quant_dequant_bit_exact(seed: int) -> None:
    from graphfuse.triton.quant.launch import fp8_dequant_into, fp8_static_quant_into

    for m, k, dt, s in _cases(6, seed):
        x = _rand((m, k), dt, s)
        scale = torch.tensor([random.Random(s).uniform(0.01, 3.0)], device="cuda")
        out = torch.full((m, k), 0xFF, dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
        fp8_static_quant_into(x, scale, out)
        ref = R.fp8_static_quant_ref(x.cpu(), scale.cpu())
        assert _same_fp8(out, ref), (m, k, dt)
        assert _same_fp8(torch.ops.graphfuse.fp8_static_quant(x, scale), ref)
        for odt in (torch.float32, torch.bfloat16, torch.float16):
            deq = torch.full((m, k), float("nan"), dtype=odt, device="cuda")
            fp8_dequant_into(out, scale, deq)
            dref = R.fp8_dequant_ref(ref, scale.cpu(), odt)
            assert _same_float(deq, dref), (m, k, odt)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fp8_upcast_exact(dtype: torch.dtype) -> None:
    """Every e4m3 byte, in a prefill-sized V (2 x 8 x 4099 x 128, odd sequence length so the
    last program is partial) and its permuted view: bit-equal to PyTorch's conversion, the
    strides kept; K-major (the sequence the unit stride) and a strided slice with
    ``contiguous=True``: bit-equal and contiguous."""
    from graphfuse.triton.quant.launch import fp8_upcast

    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, 256, (2, 8, 4099, 128), generator=g, dtype=torch.uint8)
    x = x.cuda().view(torch.float8_e4m3fn)
    for xv in (x, x.transpose(1, 2)):
        got = fp8_upcast(xv, dtype)
        assert got.stride() == xv.stride()
        assert _same_float(got, xv.to(dtype))
    k_major = x.view(2, 8, 128, 4099).transpose(2, 3)
    for xv in (k_major, x[:, :, 1::3, :100]):
        got = fp8_upcast(xv, dtype, contiguous=True)
        assert got.is_contiguous()
        assert _same_float(got, xv.to(dtype))


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("swizzle", [True, False])
def test_nvfp4_quant_dequant_bit_exact(seed: int, swizzle: bool) -> None:
    from graphfuse.triton.quant.launch import (
        nvfp4_dequant_into,
        nvfp4_quant_into,
        nvfp4_scale_shape,
    )

    for m, k, dt, s in _cases(6, seed):
        x = _rand((m, k), dt, s)
        fin = x[torch.isfinite(x)].abs()
        amax = fin.max().item() if fin.numel() else 1.0
        g = torch.tensor(448 * 6 / max(amax, 1e-30), device="cuda")
        packed = torch.full((m, k // 2), 0xA5, dtype=torch.uint8, device="cuda")
        sf = torch.full(
            nvfp4_scale_shape(m, k, swizzle), 0xFF, dtype=torch.uint8, device="cuda"
        ).view(torch.float8_e4m3fn)
        nvfp4_quant_into(x, g, packed, sf, swizzle)
        rp, rs = R.nvfp4_quant_ref(x.cpu(), g.cpu(), swizzle=swizzle)
        # NaN blocks: scale byte 0x7F, data nibbles unspecified (docs/numerics.md)
        nan_rows = torch.isnan(x.float().cpu()).view(m, k // 16, 16).any(-1)
        keep = ~nan_rows.repeat_interleave(8, dim=1)
        assert torch.equal(sf.view(torch.uint8).cpu(), rs.view(torch.uint8)), (m, k, dt, swizzle)
        assert torch.equal(packed.cpu()[keep], rp[keep]), (m, k, dt, swizzle)
        for odt in (torch.float32, torch.bfloat16):
            out = torch.full((m, k), float("nan"), dtype=odt, device="cuda")
            nvfp4_dequant_into(rp.cuda(), rs.cuda(), g, out, swizzle)
            dref = R.nvfp4_dequant_ref(rp, rs, g.cpu(), odt, swizzled=swizzle)
            assert _same_float(out, dref), (m, k, odt)


@pytest.mark.parametrize("g", [float("inf"), 2.0**120, 3e38, 1e-30, 0.0])
def test_nvfp4_quant_extreme_global_scale(g: float) -> None:
    """Global scales at the ends of fp32: g = inf makes the encode multiplier infinite (every
    nonzero value encodes to +-6, +-0 stays +-0), and so does a finite g above 2**118 for a
    block of tiny values (row 3: amax 2**-126 gives the smallest scale 2**-9, and
    1 / (2**-9 / 2**120) overflows); 3e38 / 1e-30 saturate or flush the block scales; g = 0
    (outside the contract, as inf is) gives the NaN scale of 0 * inf to the blocks holding an
    infinity. Bytes equal the reference's outside NaN blocks (a NaN value or a NaN scale:
    data nibbles unspecified, docs/numerics.md)."""
    from graphfuse.triton.quant.launch import nvfp4_quant_into, nvfp4_scale_shape

    x = _rand((130, 64), torch.bfloat16, 5)
    x[1, :16] = 0.0
    x[2, 16:32] = -0.0
    tiny = torch.linspace(0.5, 1.0, 16) * 2.0**-126 * torch.tensor([1.0, -1.0]).repeat(8)
    x[3, :16] = tiny.to(torch.bfloat16).cuda()
    gt = torch.tensor(g, device="cuda")
    packed = torch.full((130, 32), 0xA5, dtype=torch.uint8, device="cuda")
    sf = torch.full(nvfp4_scale_shape(130, 64, True), 0x11, dtype=torch.uint8, device="cuda")
    nvfp4_quant_into(x, gt, packed, sf.view(torch.float8_e4m3fn), True)
    rp, rs = R.nvfp4_quant_ref(x.cpu(), gt.cpu())
    linear = R.unswizzle_block_scales(rs, 130, 4).view(torch.uint8)
    nan_block = torch.isnan(x.float().cpu()).view(130, 4, 16).any(-1) | ((linear & 0x7F) == 0x7F)
    keep = ~nan_block.repeat_interleave(8, dim=1)
    assert _same_fp8(sf, rs)
    assert torch.equal(packed.cpu()[keep], rp[keep])


def test_quant_ops_cuda_graph() -> None:
    x = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    s = torch.tensor([0.02], device="cuda")
    g = torch.tensor([30.0], device="cuda")
    ops = torch.ops.graphfuse
    ops.fp8_static_quant(x, s)
    ops.nvfp4_quant(x, g)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        q8 = ops.fp8_static_quant(x, s)
        d8 = ops.fp8_dequant(q8, s, torch.float32)
        p4, s4 = ops.nvfp4_quant(x, g)
        d4 = ops.nvfp4_dequant(p4, s4, g, torch.float32)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    rq = R.fp8_static_quant_ref(x.cpu(), s.cpu())
    assert torch.equal(q8.view(torch.uint8).cpu(), rq.view(torch.uint8))
    assert torch.equal(d8.cpu(), R.fp8_dequant_ref(rq, s.cpu(), torch.float32))
    rp, rs = R.nvfp4_quant_ref(x.cpu(), g.cpu())
    assert torch.equal(p4.cpu(), rp) and torch.equal(
        s4.view(torch.uint8).cpu(), rs.view(torch.uint8)
    )
    assert torch.equal(d4.cpu(), R.nvfp4_dequant_ref(rp, rs, g.cpu(), torch.float32))


def test_quant_opcheck_cuda() -> None:
    x = torch.randn(32, 64, device="cuda")
    s = torch.tensor([0.05], device="cuda")
    ops = torch.ops.graphfuse
    utils = ("test_schema", "test_autograd_registration", "test_faketensor")
    torch.library.opcheck(ops.fp8_static_quant.default, (x, s), test_utils=utils)
    torch.library.opcheck(ops.nvfp4_quant.default, (x, s * 100, True), test_utils=utils)
    q8 = ops.fp8_static_quant(x, s)
    # test_schema compares FP8 inputs with ops that CUDA lacks for float8: skip it there
    torch.library.opcheck(ops.fp8_dequant.default, (q8, s, torch.bfloat16), test_utils=utils[1:])
    p, sf = ops.nvfp4_quant(x, s * 100)
    torch.library.opcheck(
        ops.nvfp4_dequant.default, (p, sf, s * 100, torch.float32, True), test_utils=utils[1:]
    )
