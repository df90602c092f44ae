"""``serving``: every fusion an FP8 / NVFP4 serving stack wants in one set: ``trtllm``
(attention + output quant), ``rmsnorm_quant`` (RMSNorm, with or without a residual add, +
quant) and ``act_quant`` (activation-and-mul + quant). Apply it to an exported decoder and
every static quant in front of a linear is fused into the op that produces its input.

``RULES`` is built when first read (again once optimum-quanto has registered its op).
"""

from __future__ import annotations

from typing import Any

from graphfuse import RuleSet

from .. import act_quant, rmsnorm_quant, trtllm
from .._quant import quanto_quantize_symmetric

_BUILT: dict[bool, RuleSet] = {}


def __getattr__(name: str) -> Any:
    if name != "RULES":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    key = quanto_quantize_symmetric() is not None
    if key not in _BUILT:
        parts = (trtllm.RULES, rmsnorm_quant.RULES, act_quant.RULES)
        _BUILT[key] = RuleSet(
            "serving", [r for part in parts for r in part], doc=__doc__.splitlines()[0]
        )
    return _BUILT[key]
