"""The Triton NVFP4 quant kernel under the Triton CPU interpreter at extreme global scales,
byte for byte against ``graphfuse/ops/quant_ref.py``, and the FP8 upcast of every byte (see
``_quant_cases.py``). Skips where Triton is not installed (the ``interpret`` extra)."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")

from ._runner import interpret  # noqa: E402


def test_nvfp4_quant_extreme_global_scales_interpreted() -> None:
    records = interpret("tests.triton_kernels._quant_cases", timeout=600)
    assert records[-1]["summary"]["cases"] == 28 + 10
