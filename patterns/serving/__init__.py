"""``serving``: every fusion an FP8 / NVFP4 serving stack wants in one set: ``trtllm``
(attention + output quant), ``rmsnorm_quant`` (RMSNorm, with or without a residual add, +
quant) and ``act_quant`` (activation-and-mul + quant). Apply it to an exported decoder and
every static quant in front of a linear is fused into the op that produces its input.

``RULES`` is built when first read (again once optimum-quanto has registered its op).
"""

from __future__ import annotations

from .. import act_quant, rmsnorm_quant, trtllm
from .._lazy import lazy_rules


def _rules() -> list:
    return [r for part in (trtllm.RULES, rmsnorm_quant.RULES, act_quant.RULES) for r in part]


__getattr__ = lazy_rules(__name__, "serving", _rules, __doc__)
