"""The C++ CPU kernels against the pure-PyTorch references, bit for bit.

Random cases are drawn fresh from a seeded RNG (seed printed); special values (ties after
scaling, ±inf, far beyond ±448·scale, ±0, denormals, zero blocks, NaN) are injected.
"""

from __future__ import annotations

import platform
import random
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import graphfuse  # noqa: F401  (registers the ops)
from graphfuse.ops import native_available
from graphfuse.ops.quant_ref import (
    fp8_dequant_ref,
    fp8_static_quant_ref,
    nvfp4_dequant_ref,
    nvfp4_quant_ref,
)

pytestmark = pytest.mark.skipif(not native_available(), reason="graphfuse._C not built")
OPS = torch.ops.graphfuse
FLOATS = [torch.float32, torch.bfloat16, torch.float16]
CSRC = Path(__file__).resolve().parents[2] / "graphfuse" / "csrc"
SEED = random.randrange(2**31)


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


def assert_fp8_equal(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == torch.float8_e4m3fn and got.shape == want.shape
    g, w = _bytes(got), _bytes(want)
    nan = (w & 0x7F) == 0x7F
    assert torch.equal((g & 0x7F) == 0x7F, nan), "NaN bytes differ"
    assert torch.equal(g[~nan], w[~nan]), f"{int((g != w)[~nan].sum())} bytes differ"


def assert_float_equal(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    bits = {torch.float32: torch.int32}.get(want.dtype, torch.int16)
    assert torch.equal(got[~nan].view(bits), want[~nan].view(bits))


def assert_nvfp4_equal(got: tuple, want: tuple, rows: int, k: int, swizzle: bool) -> None:
    (gp, gs), (wp, ws) = got, want
    assert gp.dtype == torch.uint8 and gs.dtype == torch.float8_e4m3fn
    assert gp.shape == wp.shape == (rows, k // 2) and gs.shape == ws.shape
    assert torch.equal(_bytes(gs), _bytes(ws)), "block scales differ"
    lin = nvfp4_quant_ref_linear_nan(want, rows, k, swizzle)
    keep = (~lin).repeat_interleave(8, dim=1)  # data of NaN blocks is unspecified
    assert torch.equal(gp[keep], wp[keep]), f"{int((gp != wp)[keep].sum())} packed bytes differ"


def nvfp4_quant_ref_linear_nan(want: tuple, rows: int, k: int, swizzle: bool) -> torch.Tensor:
    from graphfuse.ops.quant_ref import unswizzle_block_scales

    ws = want[1]
    lin = unswizzle_block_scales(ws, rows, k // 16) if swizzle else ws
    return _bytes(lin) == 0x7F


def special_values(x: torch.Tensor, scale: float, gen: torch.Generator) -> torch.Tensor:
    """Overwrites ~10% of x with ties, infinities, huge values, signed zeros, denormals."""
    flat = x.view(-1)
    mids = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 0.5 * (416 + 448), 2.0**-10,
                         3 * 2.0**-10, 1.5 * 2.0**-6, 17.0, 0.1875])  # fmt: skip
    pool = torch.cat(
        [
            mids * scale,
            -mids * scale,
            torch.tensor(
                [float("inf"), -float("inf"), 1e4 * 448 * scale, -1e30, 0.0, -0.0, 1e-40, -1e-42]
            ),
        ]
    )
    n = max(1, flat.numel() // 10)
    idx = torch.randint(0, flat.numel(), (n,), generator=gen)
    flat[idx] = pool[torch.randint(0, pool.numel(), (n,), generator=gen)].to(x.dtype)
    return x


SHAPES = [(1, 16), (16,), (3, 48), (129, 32), (200, 16 * 5), (2, 3, 112), (2, 2, 3, 64),
          (1, 16 * 300), (513, 144), (4, 4096 + 48)]  # fmt: skip
MAGS = [1e-3, 1e-1, 1.0, 30.0, 1e4]


def _cases(n: int, salt: int) -> list[tuple]:
    rng = random.Random(SEED + salt)
    cases = [(s, rng.choice(FLOATS), rng.choice(MAGS), rng.random() < 0.5) for s in SHAPES]
    cases += [(rng.choice(SHAPES), dt, m, rng.random() < 0.5) for dt in FLOATS for m in MAGS]
    rng.shuffle(cases)
    print(f"seed={SEED} salt={salt} cases={cases[:n]}")
    return cases[:n]


def _input(shape, dtype, mag, salt) -> tuple[torch.Tensor, torch.Generator]:
    gen = torch.Generator().manual_seed(SEED + salt)
    x = torch.randn(shape, generator=gen) * mag
    return special_values(x.to(dtype), 1.0, gen), gen


@pytest.mark.parametrize("i", range(6))
def test_fp8_quant_and_dequant_bit_exact(i: int) -> None:
    for shape, dtype, mag, _ in _cases(5, 100 + i):
        x, gen = _input(shape, dtype, mag, i)
        scale = torch.tensor(mag / 448 * float(torch.rand((), generator=gen)) + 1e-9)
        special_values(x, float(scale), gen)
        q = OPS.fp8_static_quant(x, scale)
        assert_fp8_equal(q, fp8_static_quant_ref(x, scale))
        for out in FLOATS:
            assert_float_equal(OPS.fp8_dequant(q, scale, out), fp8_dequant_ref(q, scale, out))


@pytest.mark.parametrize("i", range(6))
def test_nvfp4_quant_and_dequant_bit_exact(i: int) -> None:
    for shape, dtype, mag, swizzle in _cases(5, 200 + i):
        x, gen = _input(shape, dtype, mag, 50 + i)
        g = torch.tensor(448 * 6 / (mag * 4) * float(torch.rand((), generator=gen) + 0.5))
        x.view(-1, 16)[::7] = 0  # all-zero blocks
        rows, k = x.numel() // shape[-1], shape[-1]
        got = OPS.nvfp4_quant(x, g, swizzle)
        want = nvfp4_quant_ref(x, g, swizzle)
        assert_nvfp4_equal(got, want, rows, k, swizzle)
        for out in FLOATS:
            assert_float_equal(OPS.nvfp4_dequant(*want, g, out, swizzle),
                               nvfp4_dequant_ref(*want, g, out, swizzle))  # fmt: skip


@pytest.mark.parametrize("blocks", [7, 8, 64, 72, 75, 150])
def test_nvfp4_rows_of_many_blocks(blocks: int) -> None:
    """Rows whose block count crosses the encoder's groups (8 blocks per vector of scales, up
    to 64 scales ahead of their codes, a scalar tail), with NaN and zero blocks among them."""
    gen = torch.Generator().manual_seed(SEED + blocks)
    x = torch.randn(3, 16 * blocks, generator=gen) * torch.logspace(-3, 3, 16 * blocks)
    x.view(3, -1, 16)[:, ::5] = 0
    x[1, 16 * (blocks // 2) + 3] = float("nan")
    for dtype in FLOATS:
        xd = x.to(dtype)
        for sw in (True, False):
            assert_nvfp4_equal(OPS.nvfp4_quant(xd, torch.tensor(37.0), sw),
                               nvfp4_quant_ref(xd, torch.tensor(37.0), sw), 3, 16 * blocks,
                               sw)  # fmt: skip


def test_exact_ties_and_specials() -> None:
    scale = torch.tensor(0.5)  # x * (1/scale) is exact: every tie survives the scaling
    e4m3 = torch.arange(0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    mids = (e4m3[1:] + e4m3[:-1]) / 2
    vals = torch.cat([mids, -mids, e4m3, torch.tensor([float("inf"), -float("inf"), 1e38, -0.0])])
    for dtype in FLOATS:
        x = (vals * 0.5).to(dtype)
        assert_fp8_equal(OPS.fp8_static_quant(x, scale), fp8_static_quant_ref(x, scale))
    # NVFP4: amax 6 and g = 1 give sf = 1 and inv = 1; every e2m1 tie appears
    ties = torch.tensor([6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 0.5, 1.0, 1.5, 2.0, 3.0,
                         4.0, 0.0, -0.0])  # fmt: skip
    x = torch.stack([ties, -ties, ties * 0, -ties * 0, ties * 1e-40, ties * 1e30]).repeat(1, 2)
    x[5, 3] = float("inf")
    for dtype in FLOATS:
        xd = x.to(dtype)
        for g in (1.0, 2.0**20, 2.0**-20):
            gt = torch.tensor(g)
            for sw in (True, False):
                assert_nvfp4_equal(OPS.nvfp4_quant(xd, gt, sw), nvfp4_quant_ref(xd, gt, sw),
                                   6, 32, sw)  # fmt: skip
    # fp32: one ulp either side of every tie and grid value, each block led by 6 (inv = 1)
    grid = ties[1:14]
    near = torch.cat([torch.nextafter(grid, grid + 1), torch.nextafter(grid, grid - 1)])
    rows = torch.cat([near, -near]).view(-1, 13)
    x = torch.cat([torch.full((rows.shape[0], 1), 6.0), rows, torch.zeros(rows.shape[0], 2)], 1)
    assert_nvfp4_equal(OPS.nvfp4_quant(x, torch.tensor(1.0), False),
                       nvfp4_quant_ref(x, torch.tensor(1.0), False), 4, 16, False)  # fmt: skip


def test_nan() -> None:
    x = torch.randn(3, 64)
    x[1, 5] = float("nan")
    x[2, 63] = -float("nan")
    q = _bytes(OPS.fp8_static_quant(x, torch.tensor(0.01)))
    assert q[1, 5] == 0x7F and q[2, 63] & 0x7F == 0x7F
    packed, sf = OPS.nvfp4_quant(x, torch.tensor(100.0), False)
    sfb = _bytes(sf)
    assert sfb[1, 0] == 0x7F and sfb[2, 3] == 0x7F and int((sfb == 0x7F).sum()) == 2
    want = nvfp4_quant_ref(x, torch.tensor(100.0), False)
    assert_nvfp4_equal((packed, sf), want, 3, 64, False)


@pytest.mark.parametrize("dtype", FLOATS)
def test_non_contiguous_inputs(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(SEED)
    base = torch.randn(64, 96, 48, generator=gen).to(dtype)
    views = [base.transpose(0, 2), base[:, ::2, :32], base[1:40:3, :, 16:], base.permute(1, 2, 0),
             base.transpose(1, 2)[..., :64], base[5]]  # fmt: skip
    s, g = torch.tensor(0.013), torch.tensor(211.0)
    for v in views:
        assert not v.is_contiguous() or v is views[-1]
        assert_fp8_equal(OPS.fp8_static_quant(v, s), fp8_static_quant_ref(v, s))
        q = OPS.fp8_static_quant(v, s).transpose(0, -1)
        assert_float_equal(OPS.fp8_dequant(q, s, dtype), fp8_dequant_ref(q, s, dtype))
        rows, k = v.numel() // v.shape[-1], v.shape[-1]
        assert_nvfp4_equal(OPS.nvfp4_quant(v, g), nvfp4_quant_ref(v, g), rows, k, True)
        packed, sf = nvfp4_quant_ref(v, g, False)
        packed_t = packed.t().contiguous().t()
        assert_float_equal(OPS.nvfp4_dequant(packed_t, sf, g, dtype, False),
                           nvfp4_dequant_ref(packed, sf, g, dtype, False))  # fmt: skip


def test_swizzled_padding_is_zero_and_layout() -> None:
    x = torch.randn(130, 16 * 9) + 3.0  # every real block scale is nonzero
    packed, sf = OPS.nvfp4_quant(x, torch.tensor(50.0))
    b = _bytes(sf)
    assert b.shape == (256, 12)
    assert int((b != 0).sum()) == 130 * 9
    _, lin = OPS.nvfp4_quant(x, torch.tensor(50.0), False)
    from graphfuse.ops.quant_ref import swizzle_block_scales

    assert torch.equal(b, _bytes(swizzle_block_scales(lin)))


def test_zero_size() -> None:
    s = torch.tensor(1.0)
    for shape in [(0,), (0, 16), (3, 0), (2, 0, 5)]:
        assert OPS.fp8_static_quant(torch.randn(shape), s).shape == shape
        q = torch.empty(shape, dtype=torch.float8_e4m3fn)
        assert OPS.fp8_dequant(q, s, torch.bfloat16).shape == shape
    packed, sf = OPS.nvfp4_quant(torch.randn(0, 48), s)
    assert packed.shape == (0, 24) and sf.shape == (0, 4)
    packed, sf = OPS.nvfp4_quant(torch.randn(2, 0, 48), s, False)
    assert packed.shape == (0, 24) and sf.shape == (0, 3)
    assert OPS.nvfp4_dequant(packed, sf, s, torch.float16, False).shape == (0, 48)


def _opcheck_cases() -> list[tuple]:
    x = torch.randn(5, 3, 32, dtype=torch.bfloat16)
    s = torch.tensor([0.02])
    q = fp8_static_quant_ref(x, s)
    p, sf = nvfp4_quant_ref(x, torch.tensor(300.0))
    p2, sf2 = nvfp4_quant_ref(x, torch.tensor(300.0), False)
    return [
        (OPS.fp8_static_quant.default, (x, s)),
        (OPS.fp8_dequant.default, (q, s, torch.float16)),
        (OPS.nvfp4_quant.default, (x, torch.tensor(300.0))),
        (OPS.nvfp4_quant.default, (x.float(), torch.tensor([[300.0]]), False)),
        (OPS.nvfp4_dequant.default, (p, sf, torch.tensor(300.0), torch.bfloat16)),
        (OPS.nvfp4_dequant.default, (p2, sf2, torch.tensor(300.0), torch.float32, False)),
    ]


@pytest.mark.parametrize("case", range(6))
def test_opcheck(case: int) -> None:
    op, args = _opcheck_cases()[case]
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if any(t.dtype == torch.float8_e4m3fn for t in tensors):
        # torch's SchemaCheckMode compares inputs with a multiply that float8 lacks
        # ("mul_cpu_reduced_float" not implemented), so test_schema cannot run on fp8 inputs:
        # run the other checks and do its no-mutation / no-alias check here.
        before = [t.reshape(-1).view(torch.uint8).clone() for t in tensors]
        outs = op(*args)
        outs = outs if isinstance(outs, tuple) else (outs,)
        assert all(t.reshape(-1).view(torch.uint8).equal(b) for t, b in zip(tensors, before))
        ptrs = {t.untyped_storage().data_ptr() for t in tensors}
        assert all(o.untyped_storage().data_ptr() not in ptrs for o in outs)
        utils = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
        torch.library.opcheck(op, args, test_utils=utils)
    else:
        torch.library.opcheck(op, args)


BAD = [
    ("fp8_static_quant", lambda: OPS.fp8_static_quant(torch.randn(4), torch.ones(2)),
     r"graphfuse::fp8_static_quant: scale must have exactly one element.*\[2\]"),
    ("fp8_static_quant", lambda: OPS.fp8_static_quant(torch.ones(4, dtype=torch.int32),
                                                      torch.tensor(1.0)),
     r"graphfuse::fp8_static_quant: x must be float32, bfloat16 or float16, got Int"),
    ("fp8_static_quant", lambda: OPS.fp8_static_quant(torch.randn(4), torch.tensor(0.0)),
     r"graphfuse::fp8_static_quant: scale must be finite and > 0, got 0"),
    # the CPU kernel itself (the dispatcher would route a meta scale to the fake impl)
    ("fp8_static_quant", lambda: OPS.fp8_static_quant.default.redispatch(
        torch._C.DispatchKeySet(torch._C.DispatchKey.CPU), torch.randn(4),
        torch.tensor(1.0, device="meta")),
     r"graphfuse::fp8_static_quant: scale is on meta but the input is on cpu"),
    ("fp8_dequant", lambda: OPS.fp8_dequant(torch.randn(4), torch.tensor(1.0), torch.float32),
     r"graphfuse::fp8_dequant: x must be float8_e4m3fn, got Float"),
    ("fp8_dequant", lambda: OPS.fp8_dequant(torch.zeros(4, dtype=torch.float8_e4m3fn),
                                            torch.tensor(1.0), torch.int8),
     r"graphfuse::fp8_dequant: dtype must be float32, bfloat16 or float16, got Char"),
    ("nvfp4_quant", lambda: OPS.nvfp4_quant(torch.randn(3, 40), torch.tensor(1.0)),
     r"graphfuse::nvfp4_quant: the last dim K must be a positive multiple of 16, got K=40"),
    ("nvfp4_quant", lambda: OPS.nvfp4_quant(torch.randn(3, 32), torch.ones(1, 2)),
     r"graphfuse::nvfp4_quant: global_scale must have exactly one element, got shape \[1, 2\]"),
    ("nvfp4_quant", lambda: OPS.nvfp4_quant(torch.randn(3, 32).double(), torch.tensor(1.0)),
     r"graphfuse::nvfp4_quant: x must be float32, bfloat16 or float16, got Double"),
    ("nvfp4_dequant", lambda: OPS.nvfp4_dequant(torch.zeros(2, 8, dtype=torch.uint8),
                                                torch.zeros(2, 1, dtype=torch.float8_e4m3fn),
                                                torch.tensor(1.0), torch.float32, True),
     r"graphfuse::nvfp4_dequant: block_scale must have shape \[128, 4\].*got \[2, 1\]"),
    ("nvfp4_dequant", lambda: OPS.nvfp4_dequant(torch.zeros(2, 12, dtype=torch.uint8),
                                                torch.zeros(2, 1, dtype=torch.float8_e4m3fn),
                                                torch.tensor(1.0), torch.float32, False),
     r"graphfuse::nvfp4_dequant: K = 2 \* packed.size\(1\) must be a positive multiple.*K=24"),
    ("nvfp4_dequant", lambda: OPS.nvfp4_dequant(torch.zeros(2, 8, dtype=torch.uint8),
                                                torch.zeros(2, 1, dtype=torch.float8_e4m3fn),
                                                torch.tensor([1.0, 2.0]), torch.float32, False),
     r"graphfuse::nvfp4_dequant: global_scale must have exactly one element"),
]  # fmt: skip


@pytest.mark.parametrize("case", range(len(BAD)), ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_errors_name_the_op(case: int) -> None:
    _, call, pattern = BAD[case]
    with pytest.raises(RuntimeError, match=pattern):
        call()


def test_missing_native_module_raises_clear_error() -> None:
    code = textwrap.dedent("""
        import sys
        for name in ("graphfuse._C", "graphfuse._C_avx2"):
            sys.modules[name] = None  # the import fails as if the module were not built
        import torch, graphfuse
        from graphfuse.ops import _missing
        assert "fp8_static_quant" in _missing.MISSING
        assert graphfuse.ops.native_variant() is None
        try:
            torch.ops.graphfuse.fp8_static_quant(torch.randn(4), torch.tensor(1.0))
        except RuntimeError as e:
            print(e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "graphfuse::fp8_static_quant has no CPU kernel" in out.stdout, out.stderr


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_formats_header_standalone(tmp_path: Path) -> None:
    """formats.h alone (the scalar functions the attention kernels use) vs the references."""
    src = tmp_path / "t.cpp"
    src.write_text(
        textwrap.dedent(f"""
        #include "{CSRC / "formats.h"}"
        #include <cstdio>
        #include <vector>
        using namespace graphfuse::formats;
        int main() {{
          std::vector<float> v; float f;
          while (fread(&f, 4, 1, stdin) == 1) v.push_back(f);
          for (float x : v) putchar(float_to_e4m3(x));
          for (float x : v) putchar(float_to_e2m1(x));
          for (size_t b = 0; b + 16 <= v.size(); b += 16) {{
            uint32_t amax = 0;
            for (int i = 0; i < 16; ++i)
              amax = abs_bits(v[b + i]) > amax ? abs_bits(v[b + i]) : amax;
            Nvfp4BlockScale s = nvfp4_block_scale(bits_to_float(amax), 7.25f);
            putchar(s.sf);
            for (int i = 0; i < 16; i += 2)
              putchar(nvfp4_encode(v[b + i], s.inv) | (nvfp4_encode(v[b + i + 1], s.inv) << 4));
          }}
          float t[256]; for (int c = 0; c < 256; ++c) t[c] = e4m3_to_float(c);
          fwrite(t, 4, 256, stdout);
          printf("%lld", (long long)swizzled_scale_offset(200, 9, 3));
        }}
    """)
    )
    exe = tmp_path / "t"
    subprocess.run(["g++", "-O2", "-std=c++17", str(src), "-o", str(exe)], check=True)
    gen = torch.Generator().manual_seed(SEED)
    bits = torch.randint(-(2**31), 2**31 - 1, (1 << 16,), generator=gen, dtype=torch.int64)
    x = torch.cat([bits.to(torch.int32).view(torch.float32), torch.randn(1 << 16, generator=gen)])
    x = torch.where(x.isnan(), 1.0, x)
    out = subprocess.run([str(exe)], input=x.numpy().tobytes(), capture_output=True, check=True)
    n = x.numel()
    data = torch.frombuffer(bytearray(out.stdout), dtype=torch.uint8)
    assert torch.equal(data[:n], fp8_static_quant_ref(x, torch.tensor(1.0)).view(torch.uint8))
    from graphfuse.ops.quant_ref import e2m1_codes

    assert torch.equal(data[n : 2 * n], e2m1_codes(x))
    blocks = data[2 * n : 2 * n + n // 16 * 9].reshape(-1, 9)
    packed, sf = nvfp4_quant_ref(x.reshape(1, -1), torch.tensor(7.25), swizzle=False)
    assert torch.equal(blocks[:, 0], sf.view(torch.uint8).flatten())
    assert torch.equal(blocks[:, 1:].flatten(), packed.flatten())
    rest = bytes(data[2 * n + n // 16 * 9 :].tolist())
    table = torch.frombuffer(bytearray(rest[:1024]), dtype=torch.float32)
    want = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    assert torch.equal(table.isnan(), want.isnan())
    assert torch.equal(table[~want.isnan()], want[~want.isnan()])
    assert int(rest[1024:]) == ((200 // 128) * 3 + 9 // 4) * 512 + (200 % 32) * 16 + 2 * 4 + 1


_E2M1_SWEEP = r"""
#include "quant_simd.h"
#include <cstdio>
#include <cstdlib>
using namespace graphfuse;
// simd::e2m1_encode8 against the scalar formats::nvfp4_encode (inv = 1, so the product is the
// input) over the bit patterns lo, lo + step, ... < hi; prints the number of differences
#ifndef GRAPHFUSE_AVX2
#error "quant_simd.h did not take its AVX2 path"
#endif
int main(int argc, char** argv) {
  const unsigned long long lo = strtoull(argv[1], 0, 0), hi = strtoull(argv[2], 0, 0);
  const unsigned long long step = strtoull(argv[3], 0, 0);
  unsigned long long bad = 0;
  alignas(32) uint32_t in[8];
  alignas(32) int32_t out[8];
  for (unsigned long long b = lo; b < hi; b += 8 * step) {
    for (int i = 0; i < 8; ++i) in[i] = static_cast<uint32_t>(b + i * step);
    const __m256 x = _mm256_load_ps(reinterpret_cast<float*>(in));
    _mm256_store_si256(reinterpret_cast<__m256i*>(out),
                       simd::e2m1_encode8(x, _mm256_set1_ps(1.0f)));
    for (int i = 0; i < 8; ++i) {
      float v;
      std::memcpy(&v, &in[i], 4);
      bad += out[i] != formats::nvfp4_encode(v, 1.0f);
    }
  }
  printf("%llu", bad);
}
"""


def _e2m1_sweep(tmp_path: Path, *ranges: tuple[int, int, int]) -> list[str]:
    """Builds _E2M1_SWEEP with the AVX2 module's flags; its output for each (lo, hi, step)."""
    from torch.utils.cpp_extension import include_paths

    src, exe = tmp_path / "sweep.cpp", tmp_path / "sweep"
    src.write_text(_E2M1_SWEEP)
    inc = [f"-I{p}" for p in [str(CSRC), *include_paths()]]
    cmd = ["g++", "-O2", "-std=c++17", "-mavx2", "-mfma", "-mf16c", *inc, str(src), "-o", str(exe)]
    subprocess.run(cmd, check=True, capture_output=True)
    return [subprocess.run([str(exe), *map(str, r)], capture_output=True, text=True,
                           check=True).stdout for r in ranges]  # fmt: skip


_AVX2 = (
    shutil.which("g++") is not None
    and platform.machine() in ("x86_64", "AMD64")
    and torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")
)


@pytest.mark.skipif(not _AVX2, reason="needs g++ and an AVX2 CPU")
def test_e2m1_encode8_matches_scalar(tmp_path: Path) -> None:
    """The AVX2 e2m1 step equals the scalar threshold form: every fp32 from 2**-3 to 7 of
    both signs (all e2m1 ties and their neighbours), and a stride through all patterns."""
    got = _e2m1_sweep(tmp_path, (0x3E000000, 0x40E00000, 1), (0xBE000000, 0xC0E00000, 1),
                      (0, 1 << 32, 4099))  # fmt: skip
    assert got == ["0", "0", "0"], got


@pytest.mark.slow
@pytest.mark.skipif(not _AVX2, reason="needs g++ and an AVX2 CPU")
def test_e2m1_encode8_matches_scalar_exhaustive(tmp_path: Path) -> None:
    """As above over all 2**32 bit patterns (about 10 s)."""
    got = _e2m1_sweep(tmp_path, (0, 1 << 32, 1))
    assert got == ["0"], got
