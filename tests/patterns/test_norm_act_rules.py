"""The ``rmsnorm_quant`` and ``act_quant`` rule sets on small modules: every spelling fused on
both IRs (outputs byte-equal to the unfused program: the fused kernels round where the graph
rounds), and the near misses ``explain`` names (a tensor eps, a 2-D weight, a norm output used
unquantized, a per-channel scale, a GELU without tanh)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import graphfuse

FP8 = torch.float8_e4m3fn
gf = torch.ops.graphfuse


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


class Norm(torch.nn.Module):
    """A residual add (its sum used again), an RMSNorm in one spelling, a quant."""

    def __init__(self, spelling="hf", fmt="fp8", dtype=torch.bfloat16, k=64, miss=None):
        super().__init__()
        self.spelling, self.fmt, self.miss = spelling, fmt, miss
        w = torch.rand(1, k, generator=_gen(1)) if miss == "weight_2d" else torch.rand(k)
        self.w = torch.nn.Parameter((w + 0.5).to(dtype))
        scale = torch.full((k,), 0.0213) if miss == "per_channel" else torch.tensor(0.0213)
        self.register_buffer("s", scale)
        self.register_buffer("g", torch.tensor(317.0))
        self.register_buffer("eps", torch.tensor(1e-6))

    def forward(self, x, r):
        h = x + r
        eps = self.eps if self.miss == "eps_tensor" else 1e-6
        if self.spelling == "rms_norm":
            y = F.rms_norm(h, (h.shape[-1],), self.w, 1e-6)
        else:
            hf = h.to(torch.float32)
            hf = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)
            y = self.w * hf.to(h.dtype)
        q = (
            gf.nvfp4_quant(y, self.g)
            if self.fmt == "nvfp4"
            else (y.float() / self.s).clamp(-448, 448).to(FP8)
        )
        extra = y.sum() if self.miss == "escape" else h * 2
        return q, extra


class Act(torch.nn.Module):
    def __init__(self, spelling="silu", fmt="fp8", miss=None):
        super().__init__()
        self.spelling, self.fmt, self.miss = spelling, fmt, miss
        self.register_buffer(
            "s", torch.full((64,), 0.02) if miss == "per_channel" else torch.tensor(0.0197)
        )
        self.register_buffer("g", torch.tensor(211.0))

    def forward(self, gate, up, merged):
        if self.spelling == "merged":
            gate, up = merged.chunk(2, dim=-1)
        elif self.spelling == "sliced":
            gate, up = merged[..., :64], merged[..., 64:]
        approximate = "none" if self.miss == "gelu_erf" else "tanh"
        a = F.gelu(gate, approximate=approximate) if self.spelling == "gelu" else F.silu(gate)
        y = a * up
        if self.fmt == "nvfp4":
            return gf.nvfp4_quant(y, self.g)
        return (y.float() / self.s).clamp(-448, 448).to(FP8)


def _export(mod, args, kind):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        ep = torch.export.export(mod, args)
    return ep.run_decompositions() if kind == "core" else ep


def _norm_args(dtype=torch.bfloat16):
    g = _gen(3)
    return torch.randn(2, 8, 64, generator=g).to(dtype) * 2, torch.randn(2, 8, 64, generator=g).to(
        dtype
    )


def _act_args():
    g = _gen(4)
    return tuple(torch.randn(2, 8, n, generator=g).bfloat16() * 2 for n in (64, 64, 128))


def _bytes(outs):
    leaves = torch.utils._pytree.tree_leaves(outs)
    return [t.contiguous().view(torch.uint8) if t.dtype.itemsize == 1 else t for t in leaves]


def _fused_equal(mod, args, kind, rules, want):
    ep = _export(mod.eval(), args, kind)
    result = graphfuse.apply(ep, rules)
    assert {r: n for r, n in result.report.counts.items() if n} == want
    result.program.graph.lint()
    with torch.no_grad():
        for a, b in zip(_bytes(ep.module()(*args)), _bytes(result.program.module()(*args))):
            assert torch.equal(a, b)
    return result


@pytest.mark.parametrize("kind", ["pre", "core"])
@pytest.mark.parametrize("spelling", ["hf", "rms_norm"])
@pytest.mark.parametrize("fmt", ["fp8", "nvfp4"])
def test_norm_spellings_fuse_byte_exact(kind, spelling, fmt) -> None:
    want = {f"rms_norm_{fmt}": 1, "residual_add": 1}
    _fused_equal(Norm(spelling, fmt), _norm_args(), kind, "rmsnorm_quant", want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_norm_other_dtypes(dtype) -> None:
    want = {"rms_norm_fp8": 1, "residual_add": 1}
    _fused_equal(Norm(dtype=dtype), _norm_args(dtype), "core", "rmsnorm_quant", want)


@pytest.mark.parametrize("kind", ["pre", "core"])
@pytest.mark.parametrize("spelling", ["silu", "gelu", "merged", "sliced"])
@pytest.mark.parametrize("fmt", ["fp8", "nvfp4"])
def test_act_spellings_fuse_byte_exact(kind, spelling, fmt) -> None:
    result = _fused_equal(Act(spelling, fmt), _act_args(), kind, "act_quant", {f"act_{fmt}": 1})
    left = {n.target for n in result.program.graph.nodes if n.op == "call_function"}
    assert not left & {torch.ops.aten.silu.default, torch.ops.aten.gelu.default}


NORM_MISSES = {
    "eps_tensor": "the eps .* is a tensor; the fused op takes a constant epsilon",
    "weight_2d": r"the weight p_w has shape \[1, 64\]; the fused op takes a 1-D weight",
    "escape": "is also used by .* outside the match",
    "per_channel": r"the scale b_s has shape \[64\]; the rule needs a single element",
}


@pytest.mark.parametrize("miss", sorted(NORM_MISSES))
def test_norm_near_misses_are_explained(miss: str) -> None:
    ep = _export(Norm(miss=miss), _norm_args(), "pre")
    assert not any(graphfuse.apply(ep, "rmsnorm_quant").report.counts.values())
    reasons = [nm.reason for nm in graphfuse.explain(ep, "rmsnorm_quant").near_misses]
    assert any(__import__("re").search(NORM_MISSES[miss], r) for r in reasons), reasons


@pytest.mark.parametrize(
    "miss,pattern",
    [
        ("per_channel", r"the scale b_s has shape \[64\]; the rule needs a single element"),
        ("gelu_erf", "the GELU computes approximate='none'; the fused op computes the tanh form"),
    ],
)
def test_act_near_misses_are_explained(miss: str, pattern: str) -> None:
    spelling = "gelu" if miss == "gelu_erf" else "silu"
    ep = _export(Act(spelling, miss=miss), _act_args(), "pre")
    reasons = [nm.reason for nm in graphfuse.explain(ep, "act_quant").near_misses]
    assert any(__import__("re").search(pattern, r) for r in reasons), reasons


def test_bundled_sets_are_listed() -> None:
    from graphfuse.rules.load import bundled_names

    assert {"rmsnorm_quant", "act_quant", "serving"} <= set(bundled_names())
    serving = graphfuse.load_patterns("serving")
    names = {r.name for r in serving}
    assert {"attention_fp8_out", "rms_norm_fp8", "residual_add", "act_fp8"} <= names


def _on(ep, device: str):
    """``ep``'s graph module with every value a fake tensor on ``device`` (no such device
    needed)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    gm = ep.graph_module
    with FakeTensorMode(allow_non_fake_inputs=True):
        for node in gm.graph.nodes:
            v = node.meta.get("val")
            if isinstance(v, torch.Tensor):
                node.meta["val"] = torch.empty_strided(
                    v.shape, v.stride(), dtype=v.dtype, device=device
                )
    return gm


_KERNEL_CASES = [
    (Norm(), _norm_args(), "rmsnorm_quant", "rms_norm_quant_fp8"),
    (Norm(fmt="nvfp4"), _norm_args(), "rmsnorm_quant", "rms_norm_quant_nvfp4"),
    (Act(), _act_args(), "act_quant", "act_and_mul_quant_fp8"),
]


@pytest.mark.parametrize("mod,args,rules,op", _KERNEL_CASES)
def test_fuses_on_cuda(mod, args, rules, op) -> None:
    """The norm / activation ops have CUDA kernels: a graph on CUDA fuses as on the CPU."""
    gm = _on(_export(mod, args, "pre"), "cuda")
    res = graphfuse.apply(gm, rules)
    assert any(res.report.counts.values()), res.report.near_misses
    # the norm cases have a residual add in front
    ops = torch.ops.graphfuse
    targets = {getattr(ops, n).default for n in (op, f"add_{op}") if hasattr(ops, n)}
    fused = [n for n in res.program.graph.nodes if n.target in targets]
    assert fused, [str(n.target) for n in res.program.graph.nodes]
    val = fused[0].meta["val"]
    assert all(t.device.type == "cuda" for t in (val if isinstance(val, tuple) else (val,)))


@pytest.mark.parametrize("mod,args,rules,op", _KERNEL_CASES)
def test_no_fusion_where_the_fused_op_has_no_kernel(mod, args, rules, op) -> None:
    """A graph on a device the fused op has no kernel for (here XPU) is left as it is, with
    a near miss naming the op."""
    gm = _on(_export(mod, args, "pre"), "xpu")
    assert not any(graphfuse.apply(gm, rules).report.counts.values())
    reasons = [nm.reason for nm in graphfuse.explain(gm, rules).near_misses]
    want = f"graphfuse::{op} has no xpu kernel yet, and this graph runs on xpu"
    assert any(want in r for r in reasons), reasons
