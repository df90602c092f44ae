"""The ``act_quant`` rules: the pattern (activation-and-mul), check and rewrite."""

from __future__ import annotations

from typing import Any

import torch

from graphfuse import Builder, Match, Rule
from graphfuse import dsl as P

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
from ..rmsnorm_quant._rules import FLOATS, check_quant_input_casts


def act_and_mul() -> P.Pattern:
    """``activation(gate) * up`` (tag ``activation``): ``silu`` (``aten.silu``, or its
    core-ATen decomposition ``gate * sigmoid(gate)``, in fp32 between casts for 16-bit gates)
    or ``gelu`` (``aten.gelu`` with its ``approximate`` argument bound, checked to be
    ``"tanh"``). gate and up are any tensors: two linears' outputs, or the two halves of one
    merged linear (split / chunk / slice)."""
    gate = P.maybe(CASTS, P.tensor("gate"), name="act_upcast")
    act = P.alt(
        "activation",
        silu=P.op(aten.silu.default, gate),
        sigmoid=P.op(aten.mul.Tensor, gate, P.op(aten.sigmoid.default, gate), commutative=True),
        gelu=P.op(aten.gelu.default, gate, P.any("approximate")),
    )
    act = P.maybe(CASTS, act, name="act_downcast")
    return P.op(aten.mul.Tensor, act, P.tensor("up"), commutative=True, name="product")


def _activation(m: Match) -> str:
    return "gelu_tanh" if m.tag("activation") == "gelu" else "silu"


def check_act(m: Match) -> Any:
    """gate and up of one shape and float dtype, the product in that dtype, a tanh GELU."""
    gate, up, prod = m.val("gate"), m.val("up"), m.val("product")
    if gate.dtype not in FLOATS:
        return m.fail("gate has dtype {d}; the fused op takes fp32/bf16/fp16", "gate", d=gate.dtype)
    if up.dtype != gate.dtype or prod.dtype != gate.dtype:
        return m.fail(
            "gate ({g}) and up ({u}) differ in dtype; the fused op multiplies in gate's dtype",
            "up",
            g=gate.dtype,
            u=up.dtype,
        )
    if up.shape != gate.shape or prod.shape != gate.shape:
        return m.fail(
            "gate has shape {g} and up {u}; the fused op needs one shape",
            "up",
            g=list(gate.shape),
            u=list(up.shape),
        )
    for node in m.chain("act_upcast"):
        if node.meta["val"].dtype != torch.float32:
            return m.fail(
                "gate is cast to {d} before the activation", node, d=node.meta["val"].dtype
            )
    if len(m.chain("act_downcast")) > 1:
        return m.fail("the activation's output is cast more than once")
    if m.tag("activation") == "gelu" and m["approximate"] != "tanh":
        return m.fail(
            "the GELU computes approximate={a!r}; the fused op computes the tanh form",
            a=m["approximate"],
        )
    return None


def _check_fp8(m: Match) -> Any:
    return (
        check_act(m)
        or check_kernel(m, "gate", gf.act_and_mul_quant_fp8.default)
        or check_static_fp8_quant(m)
        or check_quant_input_casts(m, ("act_upcast", "act_downcast"))
    )


def _rewrite_fp8(m: Match, b: Builder) -> Any:
    """activation(gate) * up -> static FP8 quant, fused into graphfuse::act_and_mul_quant_fp8."""
    out = b.call(
        gf.act_and_mul_quant_fp8.default, m["gate"], m["up"], scale_operand(m, b), _activation(m)
    )
    return quant_output(m, b, out)


def _check_nvfp4(m: Match) -> Any:
    f = check_act(m) or check_kernel(m, "gate", gf.act_and_mul_quant_nvfp4.default)
    if f or (f := check_scale(m, "out_global_scale")):
        return f
    k = m.val("gate").shape[-1]
    if k % 16:
        return m.fail("the last dim is {k}; NVFP4 needs a multiple of 16", k=k)
    if not isinstance(m["swizzle"], bool):
        return m.fail("the NVFP4 quant's swizzle is {s}, not a constant", s=m["swizzle"])
    return check_quant_input_casts(m, ("act_upcast", "act_downcast"))


def _rewrite_nvfp4(m: Match, b: Builder) -> Any:
    """activation(gate) * up -> NVFP4 quant, fused into graphfuse::act_and_mul_quant_nvfp4."""
    scale = scale_operand(m, b, "out_global_scale")
    return b.call(
        gf.act_and_mul_quant_nvfp4.default, m["gate"], m["up"], scale, _activation(m), m["swizzle"]
    )


def rules() -> list[Rule]:
    """The rules, with the quant spellings registered now (``static_fp8_quant``)."""
    return [
        Rule("act_fp8", static_fp8_quant(act_and_mul()), _rewrite_fp8, _check_fp8, priority=30),
        Rule("act_nvfp4", nvfp4_quant(act_and_mul()), _rewrite_nvfp4, _check_nvfp4, priority=30),
    ]
