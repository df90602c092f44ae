"""The Triton prefill attention kernel's seeded cases (``tests/gpu/test_attention_gpu.py``'s
``run_case``: 16-bit / FP8 q, k, v, causal and masks, four layouts, wide / FP8 / NVFP4
outputs against ``attention_fp32`` with poisoned outputs) on the CPU under the Triton
interpreter, patched by ``_interpreter.patch``; the default precision and, for FP8 inputs,
fast mode. Sq = 1 cases take the dense decode kernel, as on the GPU::

    TRITON_INTERPRET=1 python -m tests.triton_kernels._prefill_cases --seed 0 --n 4
"""

from __future__ import annotations

import sys

from ._runner import gpu_cases_main


def _runs(T, case: dict):
    """Each precision the case's inputs have, through the Triton kernel (``config={}``)."""
    for precision in ("default", "fast") if case["dtype"] == T.FP8 else ("default",):
        yield {"precision": precision}, lambda p=precision: T.run_case(case, p, config={})


if __name__ == "__main__":
    sys.exit(gpu_cases_main("tests.gpu.test_attention_gpu", _runs))
