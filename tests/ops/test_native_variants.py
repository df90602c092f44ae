"""The two native modules: ``graphfuse._C`` (portable, baseline instruction set) and
``graphfuse._C_avx2`` (AVX2 + FMA + F16C), one of them chosen at import.

``ATEN_CPU_CAPABILITY=default`` makes a fresh process load the portable module, whose kernels
(the scalar paths) must agree with the references as the AVX2 ones do: quantization bit for
bit, attention within the docs/numerics.md acceptance. In this process, a CPU with AVX2 loads
the AVX2 module.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import graphfuse
from graphfuse.ops.quant_ref import fp8_dequant_ref, fp8_static_quant_ref, nvfp4_quant_ref

from .attention_cases import Case
from .test_attention_kernel import check_case
from .test_quant_kernels import (
    FLOATS,
    assert_float_equal,
    assert_fp8_equal,
    assert_nvfp4_equal,
    special_values,
)

pytestmark = pytest.mark.skipif(
    not graphfuse.ops.native_available(), reason="graphfuse native module not built"
)
ROOT = Path(__file__).resolve().parents[2]
OPS = torch.ops.graphfuse
QUANT_SHAPES = [(1, 16), (3, 48), (129, 32), (2, 3, 112), (4, 4096 + 48)]
ATTENTION_CASES = [
    Case("bf16", "fp8", 4, "top_left", 7, 33, 64, "bhsd"),
    Case("fp8", "fp8", 1, "bool", 128, 33, 128, "bs(hd)", hkv=2),
    Case("f16", "fp8", 5, "additive", 33, 65, 64, "bshd"),
    Case("f32", "fp8", 1, "bottom_right", 128, 33, 64, "bshd"),
    Case("fp8kv", "fp8", 8, "none", 1, 2048, 128, "(bs)(hd)", batch=2, hkv=2),
]


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "flags:")
    return set(line.split(":", 1)[1].split())


def check_kernels(seed: int) -> None:
    """The quant ops and attention_fp8 of the loaded native module against the references,
    on fresh inputs drawn with ``seed``."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    for shape in QUANT_SHAPES:
        dtype, mag = rng.choice(FLOATS), rng.choice([1e-3, 1.0, 1e4])
        x = special_values((torch.randn(shape, generator=gen) * mag).to(dtype), 1.0, gen)
        scale = torch.tensor(mag / 448 * (0.5 + float(torch.rand((), generator=gen))))
        q = OPS.fp8_static_quant(x, scale)
        assert_fp8_equal(q, fp8_static_quant_ref(x, scale))
        for out in FLOATS:
            assert_float_equal(OPS.fp8_dequant(q, scale, out), fp8_dequant_ref(q, scale, out))
        g = torch.tensor(448 * 6 / (mag * 4) * (0.5 + float(torch.rand((), generator=gen))))
        rows, k = x.numel() // shape[-1], shape[-1]
        for swizzle in (True, False):
            got, want = OPS.nvfp4_quant(x, g, swizzle), nvfp4_quant_ref(x, g, swizzle)
            assert_nvfp4_equal(got, want, rows, k, swizzle)
    for i, case in enumerate(ATTENTION_CASES):
        check_case(case, seed=seed + i)


def test_portable_module_when_capability_is_default() -> None:
    seed = random.randrange(2**31)
    code = textwrap.dedent(f"""
        import sys
        import graphfuse
        assert graphfuse.ops.native_variant() == "portable", graphfuse.ops.native_variant()
        assert sys.modules["graphfuse._C"].simd == "scalar"
        assert "graphfuse._C_avx2" not in sys.modules
        from tests.ops.test_native_variants import check_kernels
        check_kernels({seed})
    """)
    env = dict(os.environ, ATEN_CPU_CAPABILITY="default", GRAPHFUSE_POISON_OUTPUTS="1")
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, f"seed={seed}\n{out.stdout}\n{out.stderr}"


def _has_avx2() -> bool:
    lowered = os.environ.get("ATEN_CPU_CAPABILITY", "").lower() == "default"
    return {"avx2", "fma", "f16c"} <= _cpu_flags() and not lowered


@pytest.mark.skipif(not _has_avx2(), reason="the CPU lacks AVX2 + FMA + F16C")
def test_avx2_module_on_an_avx2_cpu() -> None:
    assert graphfuse.ops.native_variant() == "avx2"
    assert sys.modules["graphfuse._C_avx2"].simd == "avx2"
    assert "graphfuse._C" not in sys.modules


@pytest.mark.skipif(not _has_avx2(), reason="the CPU lacks AVX2 + FMA + F16C")
def test_portable_module_when_avx2_module_is_absent() -> None:
    code = textwrap.dedent("""
        import sys
        sys.modules["graphfuse._C_avx2"] = None  # the import fails as if it were not built
        import torch, graphfuse
        assert graphfuse.ops.native_variant() == "portable", graphfuse.ops.native_variant()
        x = torch.randn(4, 32)
        torch.ops.graphfuse.fp8_static_quant(x, torch.tensor(0.01))
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
