"""The shared static-quant sub-pattern (``patterns/_quant.py``): every scale its check
accepts reaches the fused op (whatever the shape or floating dtype, on both IRs), the
compressed-tensors spelling (clamp bounds as constant tensors) fuses without the library,
and each thing the check refuses is a near miss naming the quant and what is wrong."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import graphfuse

from ._numerics import assert_fp8_close, assert_nvfp4_close

FP8 = torch.float8_e4m3fn
gf = torch.ops.graphfuse
B, H, S, D = 2, 4, 16, 32
# scales holding one element: what the check accepts and the rewrite must be able to build
SCALE_SHAPES = [(), (1,), (1, 1), (1, 1, 1), (1, 1, 1, 1)]
# every shape in fp32, and the 16-bit dtypes (read as fp32 by the op)
SCALES = [(shape, torch.float32) for shape in SCALE_SHAPES]
SCALES += [((1, 1, 1), torch.bfloat16), ((1,), torch.float16)]


def _attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return o.transpose(1, 2).reshape(q.shape[0], q.shape[2], -1)


class Quantized(nn.Module):
    """SDPA -> [B, S, H*D] -> ``(x / s).clamp(lo, hi).to(dtype)``; ``bounds`` "number",
    "constant" (tensors made in forward: lifted constants, as compressed-tensors has them)
    or "input" (graph inputs)."""

    def __init__(
        self,
        lo: float = -448.0,
        hi: float = 448.0,
        bounds: str = "number",
        dtype: torch.dtype = FP8,
    ) -> None:
        super().__init__()
        self.lo, self.hi, self.bounds, self.dtype = lo, hi, bounds, dtype

    def forward(self, q: Tensor, k: Tensor, v: Tensor, s: Tensor, *bounds: Tensor) -> Tensor:
        x = _attention(q, k, v) / s
        if self.bounds == "constant":
            x = torch.clamp(x, torch.tensor(self.lo), torch.tensor(self.hi))
        elif self.bounds == "input":
            x = torch.clamp(x, *bounds)
        else:
            x = x.clamp(self.lo, self.hi)
        return x.to(self.dtype)


class Standalone(nn.Module):
    """A static quant of a graph input (the ``fp8_static_quant`` rule)."""

    def forward(self, x: Tensor, s: Tensor) -> Tensor:
        return (x.float() * s.reciprocal()).clamp(-448, 448).to(FP8)


def _qkv(seed: int = 3) -> tuple[Tensor, Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, S, D, generator=g) for _ in range(3))


def _export(mod: nn.Module, args: tuple, kind: str) -> torch.export.ExportedProgram:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        ep = torch.export.export(mod, args)
        return ep.run_decompositions() if kind == "core" else ep


def _run_both(
    ep: torch.export.ExportedProgram, args: tuple
) -> tuple[graphfuse.Result, Tensor, Tensor]:
    result = graphfuse.apply(ep, "trtllm")
    assert graphfuse.apply(ep, "trtllm", dry_run=True).report.counts == result.report.counts
    assert not [nm for nm in result.report.near_misses if "rewrite failed" in nm.reason]
    with torch.no_grad():
        return result, ep.module()(*args), result.program.module()(*args)


@pytest.mark.parametrize(("shape", "dtype"), SCALES, ids=str)
def test_every_accepted_output_scale_reaches_the_op(
    shape: tuple, dtype: torch.dtype, kind: str
) -> None:
    s = torch.full(shape, 0.01, dtype=dtype)
    args = (*_qkv(), s)
    ep = _export(Quantized(), args, kind)
    result, want, got = _run_both(ep, args)
    assert result.report.counts["attention_fp8_out"] == 1, result.report.near_misses
    assert got.shape == want.shape  # a scale of rank 4 broadcasts the [B, S, H*D] output
    assert_fp8_close(got, want, s_o=float(s.float().reshape(())))
    # freshly drawn inputs too
    fresh = (*_qkv(seed=11), s)
    with torch.no_grad():
        assert_fp8_close(result.program.module()(*fresh), ep.module()(*fresh), s_o=0.01)


@pytest.mark.parametrize("shape", SCALE_SHAPES, ids=str)
def test_every_accepted_scale_reaches_the_standalone_quant(shape: tuple, kind: str) -> None:
    x = torch.randn(B, S, H * D, generator=torch.Generator().manual_seed(4))
    args = (x, torch.full(shape, 0.01))
    result, want, got = _run_both(_export(Standalone(), args, kind), args)
    assert result.report.counts["fp8_static_quant"] == 1, result.report.near_misses
    assert got.shape == want.shape and torch.equal(got.view(torch.uint8), want.view(torch.uint8))


@pytest.mark.parametrize("shape", [(), (1,), (1, 1), (1, 1, 1, 1)], ids=str)
def test_every_accepted_input_scale_reaches_the_op(shape: tuple, kind: str) -> None:
    """An FP8 k dequantized by a scale of that shape (``k8.float() * s``), FP8 output."""

    def fn(q: Tensor, k8: Tensor, v: Tensor, sk: Tensor, s: Tensor) -> Tensor:
        return ((_attention(q, k8.float() * sk, v) / s).clamp(-448, 448)).to(FP8)

    class Fn(nn.Module):
        def forward(self, *args: Tensor) -> Tensor:
            return fn(*args)

    q, k, v = _qkv()
    args = (q, (k * 8).to(FP8), v, torch.full(shape, 0.125), torch.tensor(0.01))
    result, want, got = _run_both(_export(Fn(), args, kind), args)
    assert result.report.counts["attention_fp8_out"] == 1, result.report.near_misses
    assert_fp8_close(got, want, s_o=0.01)


@pytest.mark.parametrize("shape", [(), (1, 1, 1)], ids=str)
def test_every_accepted_nvfp4_global_scale_reaches_the_op(shape: tuple, kind: str) -> None:
    """NVFP4 output: a global scale of rank 3 is reshaped for ``attention_nvfp4`` too."""

    class Nvfp4(nn.Module):
        def forward(self, q: Tensor, k: Tensor, v: Tensor, g: Tensor) -> tuple[Tensor, Tensor]:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return gf.nvfp4_quant(o.transpose(1, 2).reshape(B * S, H * D), g)

    g = torch.full(shape, 448.0 * 6 / 3.0)
    args = (*_qkv(), g)
    result, want, got = _run_both(_export(Nvfp4(), args, kind), args)
    assert result.report.counts["attention_nvfp4_out"] == 1, result.report.near_misses
    assert_nvfp4_close(got, want, g)


def test_constant_tensor_bounds_fuse(kind: str) -> None:
    """``clamp.Tensor`` with bounds made in forward (lifted constants, read from the
    program's constants after ``run_decompositions()``)."""
    args = (*_qkv(), torch.tensor([0.01]))
    result, want, got = _run_both(_export(Quantized(bounds="constant"), args, kind), args)
    assert result.report.counts["attention_fp8_out"] == 1, result.report.near_misses
    assert_fp8_close(got, want, s_o=0.01)


REFUSED = {
    "e5m2": (
        lambda: Quantized(dtype=torch.float8_e5m2),
        (),
        "writes torch.float8_e5m2; the fused ops write torch.float8_e4m3fn",
    ),
    "bounds_240": (
        lambda: Quantized(lo=-240.0, hi=240.0),
        (),
        "clamps to [-240, 240]; the fused ops clamp to [-448, 448]",
    ),
    "constant_bounds_240": (
        lambda: Quantized(lo=-240.0, hi=240.0, bounds="constant"),
        (),
        "clamps to [-240, 240]; the fused ops clamp to [-448, 448]",
    ),
    "input_bounds": (
        lambda: Quantized(bounds="input"),
        (torch.tensor(-448.0), torch.tensor(448.0)),
        "is a tensor whose value is not a constant of the program",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_quants_name_the_quant(case: str, kind: str) -> None:
    build, extra, sentence = REFUSED[case]
    ep = _export(build(), (*_qkv(), torch.tensor(0.01), *extra), kind)
    assert graphfuse.apply(ep, "trtllm").report.total == 0
    cast = next(
        n
        for n in ep.graph.nodes
        if n.op == "call_function"
        and str(n.target) in ("aten.to.dtype", "aten._to_copy.default")
        and n.meta["val"].dtype.itemsize == 1
    )
    for rule in ("attention_fp8_out", "fp8_static_quant"):
        (miss,) = [nm for nm in graphfuse.explain(ep).near_misses if nm.rule == rule]
        assert miss.node == cast.name and sentence in miss.reason, str(miss)
        assert miss.reason.startswith(("the quant " + cast.name, "the clamp bound")), str(miss)


def test_an_integer_scale_is_refused(kind: str) -> None:
    args = (*_qkv(), torch.tensor(1, dtype=torch.int32))
    ep = _export(Quantized(), args, kind)
    result = graphfuse.apply(ep, "trtllm")
    assert result.report.total == 0
    reasons = [nm.reason for nm in result.report.near_misses if nm.rule == "attention_fp8_out"]
    assert reasons == ["the scale s has dtype torch.int32; a scale is a floating tensor"]


class QuantUnderNoGrad(nn.Module):
    """Quantization libraries quantize under ``torch.no_grad()``; exported with gradients
    on, export wraps that block in ``wrap_with_set_grad_enabled``."""

    def forward(self, q: Tensor, k: Tensor, v: Tensor, s: Tensor) -> Tensor:
        o = _attention(q, k, v)
        with torch.no_grad():
            return (o / s).clamp(-448, 448).to(FP8)


def test_a_quant_inside_a_higher_order_op_is_explained() -> None:
    args = (*_qkv(), torch.tensor(0.01))
    ep = _export(QuantUnderNoGrad(), args, "pre")
    hops = [n for n in ep.graph.nodes if isinstance(n.target, torch._ops.HigherOrderOperator)]
    assert [n.target.name() for n in hops] == ["wrap_with_set_grad_enabled"]
    assert graphfuse.apply(ep, "trtllm").report.total == 0
    (miss,) = [nm for nm in graphfuse.explain(ep).near_misses if "inside" in nm.reason]
    assert miss.rule == "fp8_static_quant" and miss.node == hops[0].name
    assert miss.reason.startswith("the pattern matches at ") and miss.reason.endswith(
        "; graphfuse does not rewrite inside higher-order ops: "
        "export under torch.no_grad() so that no-grad blocks stay inline"
    ), miss.reason
    # the fix works
    with torch.no_grad():
        fixed = _export(QuantUnderNoGrad(), args, "pre")
    assert graphfuse.apply(fixed, "trtllm").report.counts["attention_fp8_out"] == 1
