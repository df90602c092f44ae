"""The C++ CPU kernels of the fused norm / activation + quant ops against the pure-PyTorch
references (graphfuse/ops/norm_act_ref.py), byte for byte.

Every run poisons the outputs (GRAPHFUSE_POISON_OUTPUTS=1 fills them with 0xFF first), so a
byte the kernel does not write fails. Cases are a seeded sample (seed printed) of dtypes x
hidden sizes (multiples of 16 and not, below and above the 8- and 16-lane vector widths) x
options, with special values (±inf, NaN, ±0, huge, subnormal) injected. On a CPU where the
activation runs in 16 AVX-512 lanes, the act tests run again in a fresh process with
ATEN_CPU_CAPABILITY=avx2, which checks the 8-lane AVX2 path.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import graphfuse  # noqa: F401  (registers the ops)
from graphfuse.ops import native_available
from graphfuse.ops import norm_act_ref as R
from graphfuse.ops.quant_ref import unswizzle_block_scales

pytestmark = pytest.mark.skipif(not native_available(), reason="graphfuse._C not built")
OPS = torch.ops.graphfuse
FLOATS = [torch.float32, torch.bfloat16, torch.float16]
HIDDEN = [1, 7, 16, 24, 40, 100, 256, 1000, 4096, 4104]
SEED = int(os.environ.get("GRAPHFUSE_TEST_SEED", random.randrange(2**31)))


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    monkeypatch.setenv("GRAPHFUSE_POISON_OUTPUTS", "1")


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


def _nan_blocks(want: tuple) -> torch.Tensor:
    """[M, K/2] True where the packed byte belongs to a block whose scale is NaN (its data
    nibbles are unspecified, docs/numerics.md)."""
    packed, sf = want[0], want[1]
    m, kb = packed.shape[0], packed.shape[1] // 8
    lin = sf if sf.shape == (m, kb) else unswizzle_block_scales(sf, m, kb)
    return ((_bytes(lin) & 0x7F) == 0x7F).repeat_interleave(8, dim=1)


def assert_same(got, want) -> None:
    """Equal bytes, output by output; NaN bytes of FP8 outputs compare as NaN-ness, and the
    data of NVFP4 blocks with a NaN scale is not compared."""
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    nvfp4 = want[0].dtype == torch.uint8
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (i, g.dtype, w.dtype, g.shape, w.shape)
        if w.dtype == torch.float8_e4m3fn:
            gb, wb = _bytes(g), _bytes(w)
            nan = (wb & 0x7F) == 0x7F
            assert torch.equal((gb & 0x7F) == 0x7F, nan), f"output {i}: NaN bytes differ"
            bad = (gb != wb) & ~nan
        elif w.dtype.is_floating_point:
            nan = w.isnan()
            assert torch.equal(g.isnan(), nan), f"output {i}: NaN positions differ"
            bad = (_bytes(g) != _bytes(w)).reshape(*w.shape, -1).any(-1) & ~nan
        else:
            bad = (g != w) & ~_nan_blocks(want) if nvfp4 and i == 0 else g != w
        assert not bad.any(), f"output {i}: {int(bad.sum())} of {bad.numel()} differ"


def _specials(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    pool = torch.tensor([float("inf"), -float("inf"), float("nan"), 0.0, -0.0, 1e4, -3e4, 1e-30])
    flat = x.view(-1)
    n = max(1, flat.numel() // 200)
    idx = torch.randint(0, flat.numel(), (n,), generator=gen)
    flat[idx] = pool[torch.randint(0, pool.numel(), (n,), generator=gen)].to(x.dtype)
    return x


def _cases(n: int, salt: int) -> list[tuple]:
    rng = random.Random(SEED + salt)
    cases = [
        (rng.choice(FLOATS), rng.choice(HIDDEN), rng.choice([1, 3, 33, 130]), rng.random() < 0.5)
        for _ in range(n)
    ]
    print(f"seed={SEED} salt={salt} cases={cases}")
    return cases


def _norm_inputs(dtype, k, rows, gen, specials):
    x = (torch.randn(rows, k, generator=gen) * 2).to(dtype)
    res = torch.randn(rows, k, generator=gen).to(dtype)
    w_dtype = random.Random(int(torch.randint(0, 99, (1,), generator=gen))).choice(FLOATS)
    w = (torch.rand(k, generator=gen) + 0.5).to(w_dtype)
    if specials:
        _specials(x, gen)
    return x, res, w


@pytest.mark.parametrize("i", range(4))
def test_rms_norm_quant_fp8_bit_exact(i: int) -> None:
    gen = torch.Generator().manual_seed(SEED + i)
    for dtype, k, rows, specials in _cases(6, 10 + i):
        x, res, w = _norm_inputs(dtype, k, rows, gen, specials)
        s = torch.tensor(float(torch.rand((), generator=gen)) * 0.02 + 1e-3)
        for norm_dtype in (None, torch.float32):
            for wf in (False, True):
                args = (w, 1e-6, s, norm_dtype, wf)
                assert_same(OPS.rms_norm_quant_fp8(x, *args), R.rms_norm_quant_fp8_ref(x, *args))
                assert_same(
                    OPS.add_rms_norm_quant_fp8(x, res, *args),
                    R.add_rms_norm_quant_fp8_ref(x, res, *args),
                )


@pytest.mark.parametrize("i", range(4))
def test_rms_norm_quant_nvfp4_bit_exact(i: int) -> None:
    gen = torch.Generator().manual_seed(SEED + 100 + i)
    for dtype, k, rows, specials in _cases(6, 20 + i):
        k = max(16, k - k % 16)
        x, res, w = _norm_inputs(dtype, k, rows, gen, specials)
        g = torch.tensor(448 * 6 / 4.0 * float(torch.rand((), generator=gen) + 0.5))
        for wf, swizzle in ((False, True), (True, False)):
            args = (w, 1e-5, g, None, wf, swizzle)
            assert_same(OPS.rms_norm_quant_nvfp4(x, *args), R.rms_norm_quant_nvfp4_ref(x, *args))
            assert_same(
                OPS.add_rms_norm_quant_nvfp4(x, res, *args),
                R.add_rms_norm_quant_nvfp4_ref(x, res, *args),
            )


@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
def test_act_and_mul_quant_bit_exact(activation: str) -> None:
    gen = torch.Generator().manual_seed(SEED + 200)
    for dtype, k, rows, specials in _cases(8, 30 + len(activation)):
        gate = (torch.randn(rows, k, generator=gen) * 4).to(dtype)
        up = torch.randn(rows, k, generator=gen).to(dtype)
        if specials:
            _specials(gate, gen)
            _specials(up, gen)
        s = torch.tensor(0.01)
        assert_same(
            OPS.act_and_mul_quant_fp8(gate, up, s, activation),
            R.act_and_mul_quant_fp8_ref(gate, up, s, activation),
        )
        if k % 16 == 0:
            g = torch.tensor(700.0)
            for swizzle in (True, False):
                assert_same(
                    OPS.act_and_mul_quant_nvfp4(gate, up, g, activation, swizzle),
                    R.act_and_mul_quant_nvfp4_ref(gate, up, g, activation, swizzle),
                )


def test_exp_and_activations_over_the_fp32_range() -> None:
    """Every exponent from subnormal to overflow, both signs: the kernel's exp (inside silu
    and gelu_tanh) is the reference's (the FP8 bytes of activation * 1 are compared)."""
    gen = torch.Generator().manual_seed(SEED + 300)
    mags = torch.logspace(-40, 38, 4096, dtype=torch.float64).to(torch.float32)
    jitter = 1 + 0.01 * torch.rand(4096, generator=gen)
    v = torch.cat([mags * jitter, -mags * jitter, torch.linspace(-120, 120, 4096)])
    v = v.reshape(-1, 32)
    for activation in ("silu", "gelu_tanh"):
        for s in (1.0, 1e-30, 2.0**-130):
            scale = torch.tensor(s)
            assert_same(
                OPS.act_and_mul_quant_fp8(v, torch.ones_like(v), scale, activation),
                R.act_and_mul_quant_fp8_ref(v, torch.ones_like(v), scale, activation),
            )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_act_over_every_16bit_gate(dtype: torch.dtype) -> None:
    """Every bf16 / fp16 bit pattern as gate (NaNs, infs, subnormals included), the path whose
    activation is a table lookup: with random up and with up = 1 (the activation alone), FP8
    at two scales and NVFP4, silu and gelu_tanh."""
    gen = torch.Generator().manual_seed(SEED + 500)
    gate = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype)
    gate = gate.reshape(256, 256)
    g = torch.tensor(700.0)
    for up in (torch.randn(256, 256, generator=gen).to(dtype), torch.ones(256, 256, dtype=dtype)):
        for activation in ("silu", "gelu_tanh"):
            for s in (0.01, 1e-30):
                scale = torch.tensor(s)
                assert_same(
                    OPS.act_and_mul_quant_fp8(gate, up, scale, activation),
                    R.act_and_mul_quant_fp8_ref(gate, up, scale, activation),
                )
            assert_same(
                OPS.act_and_mul_quant_nvfp4(gate, up, g, activation, False),
                R.act_and_mul_quant_nvfp4_ref(gate, up, g, activation, False),
            )


@pytest.mark.skipif(
    torch.backends.cpu.get_cpu_capability() != "AVX512" or "ATEN_CPU_CAPABILITY" in os.environ,
    reason="the activation's AVX-512 path is not used here",
)
def test_act_avx2_path_where_avx512_is_used() -> None:
    """The act tests with torch's CPU capability lowered to AVX2: the 8-lane activation."""
    env = dict(os.environ, ATEN_CPU_CAPABILITY="avx2", GRAPHFUSE_TEST_SEED=str(SEED))
    tests = (
        "act_and_mul_quant_bit_exact or exp_and_activations or every_16bit or strided_and_merged"
    )
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-k", tests]
    out = subprocess.run(
        [*cmd, __file__],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert " passed" in out.stdout


@pytest.mark.parametrize("dtype", FLOATS)
def test_strided_and_merged_inputs(dtype: torch.dtype) -> None:
    """Halves of one merged [T, 2I] tensor (gate / up as views), transposed and sliced inputs."""
    gen = torch.Generator().manual_seed(SEED + 400)
    merged = torch.randn(3, 5, 2 * 96, generator=gen).to(dtype)
    gate, up = merged.chunk(2, dim=-1)
    s, g = torch.tensor(0.02), torch.tensor(300.0)
    assert_same(OPS.act_and_mul_quant_fp8(gate, up, s), R.act_and_mul_quant_fp8_ref(gate, up, s))
    assert_same(
        OPS.act_and_mul_quant_nvfp4(gate, up, g), R.act_and_mul_quant_nvfp4_ref(gate, up, g)
    )
    base = torch.randn(64, 6, 48, generator=gen).to(dtype)
    w = torch.rand(64, generator=gen).to(dtype) + 0.5
    for x in (base.permute(1, 2, 0), base.transpose(0, 2)[:, ::2], base[:, 1].t()):
        assert not x.is_contiguous()
        res = (
            torch.randn(x.shape, generator=gen)
            .to(dtype)
            .transpose(0, -1)
            .contiguous()
            .transpose(0, -1)
        )
        assert_same(OPS.rms_norm_quant_fp8(x, w, 1e-6, s), R.rms_norm_quant_fp8_ref(x, w, 1e-6, s))
        assert_same(
            OPS.add_rms_norm_quant_nvfp4(x, res, w, 1e-6, g),
            R.add_rms_norm_quant_nvfp4_ref(x, res, w, 1e-6, g),
        )


def test_zero_rows() -> None:
    s, w = torch.tensor(1.0), torch.ones(32)
    x = torch.randn(0, 32)
    assert OPS.rms_norm_quant_fp8(x, w, 1e-6, s).shape == (0, 32)
    q, h = OPS.add_rms_norm_quant_fp8(x, x, w, 1e-6, s)
    assert q.shape == h.shape == (0, 32)
    packed, sf = OPS.rms_norm_quant_nvfp4(x.reshape(2, 0, 32), w, 1e-6, s)
    assert packed.shape == (0, 16) and sf.shape == (0, 4)
    assert OPS.act_and_mul_quant_fp8(x, x, s).shape == (0, 32)


def _opcheck_cases() -> list[tuple]:
    x = torch.randn(5, 3, 32, dtype=torch.bfloat16)
    r = torch.randn(5, 3, 32, dtype=torch.bfloat16)
    w = torch.rand(32, dtype=torch.bfloat16) + 0.5
    s, g = torch.tensor([0.02]), torch.tensor(300.0)
    return [
        (OPS.rms_norm_quant_fp8.default, (x, w, 1e-6, s)),
        (OPS.rms_norm_quant_fp8.default, (x.float(), w.float(), 1e-5, s, torch.bfloat16, True)),
        (OPS.add_rms_norm_quant_fp8.default, (x, r, w, 1e-6, s)),
        (OPS.rms_norm_quant_nvfp4.default, (x, w, 1e-6, g)),
        (OPS.add_rms_norm_quant_nvfp4.default, (x, r, w, 1e-6, g, None, False, False)),
        (OPS.act_and_mul_quant_fp8.default, (x, r, s)),
        (OPS.act_and_mul_quant_nvfp4.default, (x.half(), r.half(), g, "gelu_tanh")),
    ]


@pytest.mark.parametrize("case", range(7))
def test_opcheck(case: int) -> None:
    op, args = _opcheck_cases()[case]
    torch.library.opcheck(op, args)


BAD = [
    (lambda: OPS.rms_norm_quant_fp8(torch.randn(4, 8), torch.ones(4, 8), 1e-6, torch.tensor(1.0)),
     r"graphfuse::rms_norm_quant_fp8: weight must have shape \[8\].*got \[4, 8\]"),
    (lambda: OPS.rms_norm_quant_fp8(torch.randn(4, 8), torch.ones(8), 1e-6, torch.ones(8)),
     r"graphfuse::rms_norm_quant_fp8: scale must have exactly one element, got shape \[8\]"),
    (lambda: OPS.rms_norm_quant_fp8(torch.randn(4, 8).double(), torch.ones(8), 1e-6,
                                    torch.tensor(1.0)),
     r"graphfuse::rms_norm_quant_fp8: x must be float32, bfloat16 or float16, got Double"),
    (lambda: OPS.add_rms_norm_quant_fp8(torch.randn(4, 8), torch.randn(4, 8).half(),
                                        torch.ones(8), 1e-6, torch.tensor(1.0)),
     r"graphfuse::add_rms_norm_quant_fp8: residual must have x's shape, dtype and device"),
    (lambda: OPS.rms_norm_quant_nvfp4(torch.randn(4, 40), torch.ones(40), 1e-6, torch.tensor(1.0)),
     r"graphfuse::rms_norm_quant_nvfp4: the last dim K must be a multiple of 16, got K=40"),
    (lambda: OPS.act_and_mul_quant_fp8(torch.randn(4, 8), torch.randn(4, 8), torch.tensor(1.0),
                                       "relu"),
     r"graphfuse::act_and_mul_quant_fp8: activation must be .*silu.*gelu_tanh.*, got .relu."),
    (lambda: OPS.act_and_mul_quant_nvfp4(torch.randn(4, 16), torch.randn(4, 32),
                                         torch.tensor(1.0)),
     r"graphfuse::act_and_mul_quant_nvfp4: up must have gate's shape"),
    (lambda: OPS.act_and_mul_quant_fp8(torch.randn(4, 8), torch.randn(4, 8), torch.tensor(-1.0)),
     r"graphfuse::act_and_mul_quant_fp8: scale must be finite and > 0, got -1"),
]  # fmt: skip


@pytest.mark.parametrize("case", range(len(BAD)))
def test_errors_name_the_op(case: int) -> None:
    call, pattern = BAD[case]
    with pytest.raises(RuntimeError, match=pattern):
        call()
