"""Helpers for rule authors' tests: apply a rule set to a module and check it in one call,
and the numerics acceptance checks of the quantized formats (``docs/numerics.md``).

Example::

    from graphfuse.testing import check_rules

    result = check_rules(MyAttention(), (q, k, v, s), "trtllm",
                         expect={"attention_fp8_out": 1}, decompose=True)
"""

from __future__ import annotations

from .numerics import assert_fp8_close as assert_fp8_close
from .numerics import assert_nvfp4_close as assert_nvfp4_close
from .numerics import e4m3_ordinal as e4m3_ordinal
from .rules import assert_outputs_close as assert_outputs_close
from .rules import check_rules as check_rules
from .rules import fresh_like as fresh_like

__all__ = [
    "assert_fp8_close",
    "assert_nvfp4_close",
    "assert_outputs_close",
    "check_rules",
    "e4m3_ordinal",
    "fresh_like",
]
