"""Static quantization as exporters and quantization libraries spell it: one sub-pattern per
meaning, shared by every bundled rule set whose fusion ends in a static quant (attention,
norm, activation), with the check and the scale operand that go with it.

``static_fp8_quant(x)`` is docs/numerics.md's ``fp8_static_quant(x, out_scale)``, tag
``quant``:

- ``eager``: ``x / s`` (or ``x * (1 / s)``, ``x * s.reciprocal()``), then a clamp, then a
  cast to FP8, ``x`` possibly cast first. Hand-written code; torchao's
  ``Float8StaticActivationFloat8WeightConfig`` (an fp32 upcast, a ``[1, 1, 1]`` scale);
  compressed-tensors (``clamp.Tensor`` whose bounds are lifted constant tensors, the division
  in the activation's dtype).
- ``op``: ``graphfuse::fp8_static_quant(x, s)``.
- ``quanto``: ``quanto::quantize_symmetric(x, dtype, axis, s)`` (optimum-quanto's ``qfloat8``
  activations); present when optimum-quanto has registered its ops.

Structure only: the pattern takes any float8 dtype, any clamp bounds and any axis, so that
:func:`check_static_fp8_quant` can say what a near miss got wrong (an e5m2 cast, bounds of
±240, a per-axis scale). The quant's root node is bound as ``quant``.
"""

from __future__ import annotations

from numbers import Number
from typing import Any

import torch
from torch import fx

from graphfuse import Builder, Match
from graphfuse import dsl as P
from graphfuse.io import constant_value

aten = torch.ops.aten
prims = torch.ops.prims
gf = torch.ops.graphfuse
FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0

CASTS = [aten.to.dtype, aten._to_copy.default, prims.convert_element_type.default]
# the 8-bit float dtypes a quant may cast to, by tag; only e4m3fn fuses
FP8_DTYPES = {
    name: dtype
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
    if isinstance(dtype := getattr(torch, name, None), torch.dtype)
}


def cast(x: P.Pattern, dtype: object = P._, *, name: str | None = None) -> P.Pattern:
    """``x.to(dtype)`` in any of its spellings (the cast node bound as ``name``)."""
    return P.alt(
        to=P.op(aten.to.dtype, x, dtype, name=name),
        copy=P.op(aten._to_copy.default, x, dtype=dtype, name=name),
        convert=P.op(prims.convert_element_type.default, x, dtype, name=name),
    )


def maybe_cast(x: P.Pattern) -> P.Pattern:
    return P.maybe(CASTS, x)


def _fp8_dtype() -> P.Pattern:
    return P.alt("quant_dtype", **{name: P.lit(dtype) for name, dtype in FP8_DTYPES.items()})


def _scaled_by_inverse(x: P.Pattern, s: P.Pattern) -> P.Pattern:
    recip = P.op(aten.reciprocal.default, s)
    inverse = recip | P.op(aten.mul.Tensor, recip, 1, commutative=True)
    return P.alt(
        "quant_spelling",
        div=P.op(aten.div.Tensor, x, s),
        mul=P.op(aten.mul.Tensor, x, inverse, commutative=True),
    )


def _clamped(x: P.Pattern) -> P.Pattern:
    """A clamp to ``[quant_min, quant_max]``: numbers or tensors (tag ``clamp``)."""
    lo, hi = P.any("quant_min"), P.any("quant_max")
    return P.alt(
        "clamp",
        clamp=P.op(aten.clamp.default, x, lo, hi),
        tensor=P.op(aten.clamp.Tensor, x, lo, hi),
        min_max=P.op(aten.clamp_max.default, P.op(aten.clamp_min.default, x, lo), hi),
        max_min=P.op(aten.clamp_min.default, P.op(aten.clamp_max.default, x, hi), lo),
        core_min_max=P.op(aten.clamp.default, P.op(aten.clamp.default, x, lo, None), None, hi),
    )


def eager_fp8_quant(x: P.Pattern) -> P.Pattern:
    """``(x / s).clamp(lo, hi).to(fp8)`` in every eager spelling, dequant scale ``out_scale``
    (the ``eager`` branch of :func:`static_fp8_quant`)."""
    scaled = _scaled_by_inverse(maybe_cast(x), P.tensor("out_scale"))
    return cast(_clamped(scaled), _fp8_dtype(), name="quant")


def quanto_quantize_symmetric() -> Any:
    """``torch.ops.quanto.quantize_symmetric.default``, or None while optimum-quanto has not
    registered it (its ops exist once ``optimum.quanto`` is imported)."""
    try:
        return torch.ops.quanto.quantize_symmetric.default
    except (AttributeError, RuntimeError):
        return None


def static_fp8_quant(x: P.Pattern) -> P.Pattern:
    """Static per-tensor FP8 quantization of ``x`` with dequant scale ``out_scale``, in every
    spelling this module lists (tag ``quant``); conditions in :func:`check_static_fp8_quant`.

    Example: ``Rule("norm_fp8", static_fp8_quant(rms_norm), rewrite, check)`` where check
    calls ``check_static_fp8_quant(m)`` and rewrite passes ``scale_operand(m, b)``."""
    branches = {
        "eager": eager_fp8_quant(x),
        "op": P.op(gf.fp8_static_quant.default, maybe_cast(x), P.tensor("out_scale"), name="quant"),
    }
    quanto = quanto_quantize_symmetric()
    if quanto is not None:
        branches["quanto"] = P.op(
            quanto,
            maybe_cast(x),
            _fp8_dtype(),
            P.any("quant_axis"),
            P.tensor("out_scale"),
            name="quant",
        )
    return P.alt("quant", **branches)


def nvfp4_quant(x: P.Pattern) -> P.Pattern:
    """``graphfuse::nvfp4_quant(x, g, swizzle)`` (both outputs stay with the op node)."""
    return P.op(
        gf.nvfp4_quant.default, maybe_cast(x), P.tensor("out_global_scale"), P.any("swizzle")
    )


# --------------------------------------------------------------------------- checks


def check_scale(m: Match, name: str) -> Any:
    """None when ``name`` is a scale the fused ops take once :func:`scale_operand` has
    shaped it: one element of a floating dtype, any rank."""
    f = m.single_element(name)
    if f:
        return f
    dtype = m.val(name).dtype
    if not dtype.is_floating_point:
        return m.fail(
            "the scale {s} has dtype {d}; a scale is a floating tensor", s=m[name].name, d=dtype
        )
    return None


def scale_operand(m: Match, b: Builder, name: str = "out_scale") -> fx.Node | None:
    """The scale bound to ``name`` as the fused ops take it (shape ``[]``, ``[1]`` or
    ``[1, 1]``): a scale of rank 0 or 1 as it is, a higher rank (torchao's ``[1, 1, 1]``)
    reshaped to ``[]``. None when nothing is bound to ``name``."""
    node = m.get(name)
    if node is None:
        return None
    if m.val(name).dim() <= 1:
        return node
    return b.call(aten.reshape.default, node, [])


def quant_output(m: Match, b: Builder, quantized: fx.Node) -> fx.Node:
    """``quantized`` (x quantized, x's shape) in the shape of the matched quant's output: a
    scale of a higher rank than x (``[1, 1, 1, 1]`` on a 3-D x) broadcasts x to leading
    size-1 dims, which ``unsqueeze`` adds back."""
    extra = m["quant"].meta["val"].dim() - quantized.meta["val"].dim()
    for _ in range(extra):
        quantized = b.call(aten.unsqueeze.default, quantized, 0)
    return quantized


# copies export puts between a constant made in forward (``torch.tensor(448.0)``) and its use
_COPIES = (aten.lift_fresh_copy.default, aten.detach.default, aten.detach_.default)
_COPIES += (aten.clone.default, aten.alias.default)


def _bound(m: Match, name: str) -> float | None:
    """The clamp bound ``name`` as a number: a literal, or a constant tensor's value."""
    v = m.get(name)
    if isinstance(v, Number) and not isinstance(v, bool):
        return float(v)
    while isinstance(v, fx.Node) and v.target in _COPIES:
        v = v.args[0]
    t = constant_value(v)
    if t is not None and t.numel() == 1 and t.dtype.is_floating_point:
        return float(t)
    return None


def check_static_fp8_quant(m: Match) -> Any:
    """The conditions under which a match of :func:`static_fp8_quant` means
    ``fp8_static_quant(x, out_scale)``: the e4m3fn dtype, a clamp to ±448, a per-tensor
    scale of one floating element. Each failure names the quant node."""
    quant = m["quant"]
    tag = m.tag("quant") or "eager"  # no tag: a rule of the eager spellings alone
    if tag != "op":
        dtype = FP8_DTYPES[m.tag("quant_dtype")]
        if dtype != FP8:
            return m.fail(
                "the quant {q} writes {d}; the fused ops write torch.float8_e4m3fn",
                quant,
                q=quant.name,
                d=dtype,
            )
    if tag == "quanto" and m.get("quant_axis") is not None:
        return m.fail(
            "the quant {q} scales along axis {a}; a static per-tensor quant has axis None",
            quant,
            q=quant.name,
            a=m["quant_axis"],
        )
    if tag == "eager":
        lo, hi = _bound(m, "quant_min"), _bound(m, "quant_max")
        if lo is None or hi is None:
            which = "quant_min" if lo is None else "quant_max"
            return m.fail(
                "the clamp bound {b} of the quant {q} is a tensor whose value is not a constant "
                "of the program",
                quant,
                b=getattr(m[which], "name", m[which]),
                q=quant.name,
            )
        if (lo, hi) != (-FP8_MAX, FP8_MAX):
            return m.fail(
                "the quant {q} clamps to [{lo:g}, {hi:g}]; the fused ops clamp to [-448, 448]",
                quant,
                q=quant.name,
                lo=lo,
                hi=hi,
            )
    return check_scale(m, "out_scale")
