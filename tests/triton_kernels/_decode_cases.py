"""The paged decode kernel's seeded cases (``tests/gpu/test_paged_decode_gpu.py``: FP8 and
bf16 KV caches, split-KV on and off, register prefetch, wide / FP8 / NVFP4 outputs against
``paged_decode_fp32`` with poisoned outputs) on the CPU under the Triton interpreter, patched
by ``_interpreter.patch`` (which computes the FP8 V conversion's inline asm with torch)::

    TRITON_INTERPRET=1 python -m tests.triton_kernels._decode_cases --seed 0 --n 4
"""

from __future__ import annotations

import sys

from ._runner import gpu_cases_main


def _runs(T, case: dict):
    yield {}, lambda: T.run_case(case)


if __name__ == "__main__":
    sys.exit(gpu_cases_main("tests.gpu.test_paged_decode_gpu", _runs))
