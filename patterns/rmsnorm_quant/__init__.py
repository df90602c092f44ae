"""``rmsnorm_quant``: RMSNorm followed by a static FP8 or NVFP4 quant, fused into one
``graphfuse::rms_norm_quant_*`` op; with a residual add in front, into the ``add_`` variant
that also returns the sum (the next layer's residual).

Rules (priority order):
- ``rms_norm_fp8``: RMSNorm -> static FP8 quant -> ``rms_norm_quant_fp8`` (a residual add
  in front: ``add_rms_norm_quant_fp8``, reading the add's operands)
- ``rms_norm_nvfp4``: RMSNorm -> ``nvfp4_quant`` -> ``rms_norm_quant_nvfp4`` (or its ``add_``
  variant)
- ``residual_add``: a residual add whose operands a fused ``add_`` op reads -> the add is
  removed and its users read the sum the fused op returns
- ``shared_quant``: two ``fp8_static_quant`` of one tensor with one scale (each of q / k / v
  quantizing its input) -> one (``serving`` turns eager quants into that op first)

``RULES`` is built when first read, and again once a quantization library has registered
the op of a quant spelling (optimum-quanto), as ``trtllm``'s.
"""

from __future__ import annotations

from .._lazy import lazy_rules
from ._rules import rules

__getattr__ = lazy_rules(__name__, "rmsnorm_quant", rules, __doc__)
