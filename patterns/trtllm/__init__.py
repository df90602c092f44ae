"""``trtllm``: attention followed by a static FP8 / NVFP4 output quantization (and FP8
q/k/v inputs) fused into one ``graphfuse::attention*`` op, as serving engines do for
NVIDIA's TRTLLM attention kernels.

Rules (priority order):
- ``attention_fp8_out``: attention -> layout ops -> static FP8 quant -> ``attention_fp8``
- ``attention_nvfp4_out``: attention -> layout ops -> ``nvfp4_quant`` -> ``attention_nvfp4``
- ``attention_fp8_inputs``: attention over dequantised FP8 inputs -> ``attention`` (16-bit)
- ``paged_decode_fp8_out`` / ``paged_decode_nvfp4_out``: ``paged_decode_attention`` ->
  reshapes -> static FP8 / NVFP4 quant -> ``paged_decode_attention_fp8`` / ``_nvfp4``
- ``fp8_static_quant``: any other eager FP8 static quant -> ``fp8_static_quant``
"""

from __future__ import annotations

from graphfuse import RuleSet

from ._paged import PAGED_RULES
from ._rules import RULES_LIST

RULES = RuleSet("trtllm", RULES_LIST + PAGED_RULES, doc=__doc__.splitlines()[0])
