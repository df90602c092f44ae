"""``act_quant``: activation-and-mul (``silu(gate) * up``, ``gelu_tanh(gate) * up``) followed
by a static FP8 or NVFP4 quant, fused into one ``graphfuse::act_and_mul_quant_*`` op.

Rules:
- ``act_fp8``: activation(gate) * up -> static FP8 quant -> ``act_and_mul_quant_fp8``
- ``act_nvfp4``: activation(gate) * up -> ``nvfp4_quant`` -> ``act_and_mul_quant_nvfp4``

gate and up come from two linears or from the halves of one merged linear (split, chunk,
slice): the fused op reads them in place. ``RULES`` is built when first read, and again once
a quantization library has registered the op of a quant spelling (optimum-quanto).
"""

from __future__ import annotations

from .._lazy import lazy_rules
from ._rules import rules

__getattr__ = lazy_rules(__name__, "act_quant", rules, __doc__)
