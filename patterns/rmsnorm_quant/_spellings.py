"""RMSNorm as models and exporters spell it, as one pattern value whose spellings are tagged
alternatives (tag ``norm``):

- ``cast_first``: transformers' LlamaRMSNorm (Qwen2, Mistral and others copy it):
  ``w * (x.float() * rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)``;
- ``weight_first``: the core-ATen decomposition of ``aten.rms_norm`` (and models that multiply
  by the weight before casting back): ``((xf * rsqrt(...)) * w).to(x.dtype)``;
- ``rms_norm``: ``aten.rms_norm(x, [K], w, eps)`` (``F.rms_norm`` exported pre-dispatch).

Structure only; ``_rules.check_norm`` says what a near miss got wrong (a tensor eps, a 2-D
weight, a rounding cast).
"""

from __future__ import annotations

from graphfuse import dsl as P

from .._quant import CASTS, aten


def _upcast() -> P.Pattern:
    """x read in fp32 (``x.to(float32)``; nothing when x is fp32 already), chain ``upcast``."""
    return P.maybe(CASTS, P.tensor("x"), name="upcast")


def rms_norm() -> P.Pattern:
    """RMSNorm of ``x`` with weight ``weight`` and epsilon ``eps`` (tag ``norm``); the
    casts back to the model dtype are the chain ``downcast``."""
    xf = _upcast()
    square = P.op(aten.pow.Tensor_Scalar, xf, 2) | P.op(aten.mul.Tensor, xf, xf)
    mean_square = P.op(aten.mean.dim, square, [-1], True)
    eps = P.op({aten.add.Tensor, aten.add.Scalar}, mean_square, P.any("eps"), commutative=True)
    normed = P.op(
        aten.mul.Tensor, xf, P.op(aten.rsqrt.default, eps, name="rsqrt"), commutative=True
    )
    weight = P.tensor("weight")
    return P.alt(
        "norm",
        cast_first=P.op(
            aten.mul.Tensor, P.maybe(CASTS, normed, name="downcast"), weight, commutative=True
        ),
        weight_first=P.maybe(
            CASTS, P.op(aten.mul.Tensor, normed, weight, commutative=True), name="downcast"
        ),
        rms_norm=P.op(
            aten.rms_norm.default, P.tensor("x"), P.any("normalized_shape"), weight, P.any("eps")
        ),
    )
