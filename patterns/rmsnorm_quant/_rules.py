"""The ``rmsnorm_quant`` rules: check (every condition, one sentence each) and rewrite."""

from __future__ import annotations

from numbers import Number
from typing import Any

import torch
from torch import fx

from graphfuse import Builder, Match, Rule
from graphfuse import dsl as P
from graphfuse.io import constant_value

from .._kernels import check_kernel
from .._quant import (
    CASTS,
    aten,
    check_scale,
    check_static_fp8_quant,
    gf,
    nvfp4_quant,
    quant_output,
    scale_operand,
    static_fp8_quant,
)
from ._spellings import rms_norm

FLOATS = (torch.float32, torch.bfloat16, torch.float16)
_WIDE = (torch.float32, torch.float64)
_FP32_EPS = torch.finfo(torch.float32).eps  # aten.rms_norm's eps=None for 16/32-bit inputs


def _dtype(node: Any) -> torch.dtype | None:
    val = node.meta.get("val") if isinstance(node, fx.Node) else None
    return val.dtype if isinstance(val, torch.Tensor) else None


def _exact(cast: fx.Node) -> bool:
    """A cast that loses nothing: to the same dtype, or from a float to fp32 / fp64."""
    src, dst = _dtype(cast.args[0]), _dtype(cast)
    return dst == src or (dst in _WIDE and src in FLOATS + _WIDE)


def check_quant_input_casts(m: Match, named: tuple[str, ...]) -> Any:
    """Casts the quant sub-pattern saw through in front of its scaling (every matched cast
    outside the chains ``named``, but the quant's own cast) must be exact: the fused op
    quantizes the unrounded value."""
    skip = {n for name in named for n in m.chain(name)}
    skip.add(m.get("quant"))
    for node in m.nodes:
        if node.target in CASTS and node not in skip and not _exact(node):
            return m.fail(
                "{n} casts to {d} before the quant, which rounds; the fused op quantizes the "
                "{s} value",
                node,
                n=node.name,
                d=_dtype(node),
                s=_dtype(node.args[0]),
            )
    return None


def _eps(m: Match) -> Any:
    eps = m.get("eps")
    if eps is None and m.tag("norm") == "rms_norm":
        return _FP32_EPS
    if isinstance(eps, Number) and not isinstance(eps, bool):
        return float(eps)
    return m.fail(
        "the eps {e} is a tensor; the fused op takes a constant epsilon",
        eps if isinstance(eps, fx.Node) else None,
        e=getattr(eps, "name", eps),
    )


def check_norm(m: Match) -> Any:
    """The conditions of every fused RMSNorm. Leaves ``m.memo["norm"]`` = (eps, norm_dtype,
    weight_first) for the rewrite."""
    x, w = m.val("x"), m.val("weight")
    if x.dtype not in FLOATS or x.dim() < 1:
        return m.fail("x has dtype {d}; the fused op takes fp32/bf16/fp16", "x", d=x.dtype)
    k = x.shape[-1]
    if w.dim() != 1 or w.shape[0] != k:
        return m.fail(
            "the weight {w} has shape {s}; the fused op takes a 1-D weight of the hidden size {k}",
            "weight",
            w=m["weight"].name,
            s=list(w.shape),
            k=k,
        )
    if w.dtype not in FLOATS:
        return m.fail("the weight {w} has dtype {d}", "weight", w=m["weight"].name, d=w.dtype)
    eps = _eps(m)
    if not isinstance(eps, float):
        return eps
    tag = m.tag("norm")
    if tag == "rms_norm":
        shape = m["normalized_shape"]
        if not (isinstance(shape, (list, tuple)) and len(shape) == 1 and shape[0] == k):
            return m.fail("rms_norm normalises over {s}; the fused op over the last dim", s=shape)
        m.memo["norm"] = (eps, x.dtype, True)
        return None
    if m.val("rsqrt").dtype != torch.float32:
        return m.fail("the norm is computed in {d}; the fused op computes it in fp32",
                      "rsqrt", d=m.val("rsqrt").dtype)  # fmt: skip
    for node in m.chain("upcast"):
        if not _exact(node):
            return m.fail("x is cast to {d} before the norm, which rounds", node, d=_dtype(node))
    down = m.chain("downcast")
    if len(down) > 1:
        return m.fail("the norm's output is cast {n} times", down[0], n=len(down))
    norm_dtype = _dtype(down[0]) if down else torch.float32
    if norm_dtype not in FLOATS:
        return m.fail("the norm is rounded to {d}", down[0], d=norm_dtype)
    m.memo["norm"] = (eps, norm_dtype, tag == "weight_first")
    return None


def residual_operands(x: fx.Node) -> tuple[fx.Node, fx.Node] | None:
    """(a, b) when ``x`` is ``a + b`` of two tensors of x's shape and dtype (a residual
    add); else None."""
    if x.op != "call_function" or x.target is not aten.add.Tensor or len(x.args) != 2:
        return None
    if x.kwargs.get("alpha", 1) != 1:
        return None
    a, b = x.args
    val = x.meta.get("val")
    for t in (a, b):
        tv = t.meta.get("val") if isinstance(t, fx.Node) else None
        if not isinstance(tv, torch.Tensor) or tv.dtype != val.dtype or tv.shape != val.shape:
            return None
    return a, b


def _norm_args(m: Match) -> tuple[list, tuple]:
    """The fused op's leading arguments (x, or x and residual, then the weight and eps) and
    (norm_dtype, weight_first)."""
    eps, norm_dtype, weight_first = m.memo["norm"]
    x = m["x"]
    res = residual_operands(x)
    head = [*res] if res else [x]
    return head + [m["weight"], eps], (norm_dtype, weight_first), res is not None


def _check_fp8(m: Match) -> Any:
    return (
        check_norm(m)
        or check_kernel(m, "x", gf.rms_norm_quant_fp8.default)
        or check_static_fp8_quant(m)
        or check_quant_input_casts(m, ("upcast", "downcast"))
    )


def _rewrite_fp8(m: Match, b: Builder) -> Any:
    """RMSNorm -> static FP8 quant, fused into graphfuse::rms_norm_quant_fp8 (or
    add_rms_norm_quant_fp8 when the norm's input is a residual add)."""
    head, tail, add = _norm_args(m)
    op = gf.add_rms_norm_quant_fp8.default if add else gf.rms_norm_quant_fp8.default
    out = b.call(op, *head, scale_operand(m, b), *tail)
    return quant_output(m, b, b.getitem(out, 0) if add else out)


def _check_nvfp4(m: Match) -> Any:
    f = check_norm(m) or check_kernel(m, "x", gf.rms_norm_quant_nvfp4.default)
    if f or (f := check_scale(m, "out_global_scale")):
        return f
    if m.val("x").shape[-1] % 16:
        return m.fail(
            "the hidden size is {k}; NVFP4 needs a multiple of 16", k=m.val("x").shape[-1]
        )
    if not isinstance(m["swizzle"], bool):
        return m.fail("the NVFP4 quant's swizzle is {s}, not a constant", s=m["swizzle"])
    return check_quant_input_casts(m, ("upcast", "downcast"))


def _rewrite_nvfp4(m: Match, b: Builder) -> Any:
    """RMSNorm -> NVFP4 quant, fused into graphfuse::rms_norm_quant_nvfp4 (or
    add_rms_norm_quant_nvfp4 when the norm's input is a residual add)."""
    head, tail, add = _norm_args(m)
    op = gf.add_rms_norm_quant_nvfp4.default if add else gf.rms_norm_quant_nvfp4.default
    out = b.call(op, *head, scale_operand(m, b, "out_global_scale"), *tail, m["swizzle"])
    return b.getitem(out, 0), b.getitem(out, 1)


# ------------------------------------------------------------------ the residual add


def _fused_with_residual() -> P.Pattern:
    """A fused add_rms_norm op reading the add's operands (its scale possibly reshaped)."""
    scale = P.maybe([aten.reshape.default], P.tensor("scale"), name="scale_view")
    common = (P.any("x"), P.any("residual"), P.tensor("weight"), P.any("eps"), scale)
    return P.alt(
        "format",
        fp8=P.op(gf.add_rms_norm_quant_fp8.default, *common, P.any("nd"), P.any("wf")),
        nvfp4=P.op(
            gf.add_rms_norm_quant_nvfp4.default, *common, P.any("nd"), P.any("wf"), P.any("sw")
        ),
    )


def _rewrite_residual(m: Match, b: Builder) -> Any:
    """A residual add whose operands a fused add_rms_norm op reads again: the add is retired,
    its users read the sum the fused op returns."""
    scale = m["scale"]
    if m.chain("scale_view"):
        scale = b.call(aten.reshape.default, scale, [])
    fp8 = m.tag("format") == "fp8"
    op = gf.add_rms_norm_quant_fp8.default if fp8 else gf.add_rms_norm_quant_nvfp4.default
    tail = (m["nd"], m["wf"]) if fp8 else (m["nd"], m["wf"], m["sw"])
    fused = b.call(op, m["x"], m["residual"], m["weight"], m["eps"], scale, *tail)
    return b.getitem(fused, 1 if fp8 else 2), fused


# ------------------------------------------------------------------ one quant, several readers


def _check_shared(m: Match) -> Any:
    a, b = m["scale"], m["scale2"]
    if a is b:
        return None
    va, vb = constant_value(a), constant_value(b)
    if va is not None and vb is not None and va.shape == vb.shape and torch.equal(va, vb):
        return None
    return m.fail("{a} and {b} quantize one tensor with different scales", a=a.name, b=b.name)


def _rewrite_shared(m: Match, b: Builder) -> Any:
    """Two static FP8 quants of one tensor with one scale (each linear quantizing its input
    on its own, as q / k / v or gate / up do) become one, which the norm rules then fuse."""
    q = b.call(gf.fp8_static_quant.default, m["x"], m["scale"])
    return q, q


def rules() -> list[Rule]:
    """The rules, with the quant spellings registered now (``static_fp8_quant``)."""
    nvq = nvfp4_quant(rms_norm())
    add = P.op(aten.add.Tensor, P.tensor("x"), P.tensor("residual"), alpha=1, name="sum")
    return [
        Rule("rms_norm_fp8", static_fp8_quant(rms_norm()), _rewrite_fp8, _check_fp8, priority=30),
        Rule(
            "rms_norm_nvfp4",
            (P.getitem(nvq, 0), P.getitem(nvq, 1)),
            _rewrite_nvfp4,
            _check_nvfp4,
            priority=30,
        ),
        Rule("residual_add", (add, _fused_with_residual()), _rewrite_residual, priority=25),
        Rule(
            "shared_quant",
            (
                P.op(gf.fp8_static_quant.default, P.tensor("x"), P.tensor("scale")),
                P.op(gf.fp8_static_quant.default, P.any("x"), P.tensor("scale2")),
            ),
            _rewrite_shared,
            _check_shared,
            priority=28,
        ),
    ]
