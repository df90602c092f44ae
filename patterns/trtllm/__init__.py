"""``trtllm``: attention followed by a static FP8 / NVFP4 output quantization (and FP8
q/k/v inputs) fused into one ``graphfuse::attention*`` op, as serving engines do for
NVIDIA's TRTLLM attention kernels.

Rules (priority in brackets; a higher one is tried first where two share a root):
- ``attention_fp8_out`` (20): attention -> layout ops -> static FP8 quant -> ``attention_fp8``
- ``attention_nvfp4_out`` (20): attention -> layout ops -> ``nvfp4_quant`` ->
  ``attention_nvfp4``
- ``paged_decode_fp8_out`` / ``paged_decode_nvfp4_out`` (15): ``paged_decode_attention`` ->
  reshapes -> static FP8 / NVFP4 quant -> ``paged_decode_attention_fp8`` / ``_nvfp4``
  (rooted at the quant as the attention rules are, never matching where they do: below
  them, a quant the attention rule fused is not tried again)
- ``attention_fp8_inputs`` (10): attention over dequantised FP8 inputs -> ``attention``
  (16-bit)
- ``fp8_static_quant`` (0): any other eager FP8 static quant -> ``fp8_static_quant``

``RULES`` is built when first read, and built again once a quantization library has
registered the op of a quant spelling (optimum-quanto's ``quantize_symmetric`` exists only
after ``import optimum.quanto``), so the order of imports does not matter.
"""

from __future__ import annotations

from .._lazy import lazy_rules
from ._paged import paged_rules
from ._rules import rules

__getattr__ = lazy_rules(__name__, "trtllm", lambda: rules() + paged_rules(), __doc__)
