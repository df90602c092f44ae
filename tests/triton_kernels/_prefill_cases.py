"""The Triton prefill attention kernel's seeded cases (``tests/gpu/test_attention_gpu.py``'s
``run_case``: 16-bit / FP8 q, k, v, causal and masks, four layouts, wide / FP8 / NVFP4
outputs against ``attention_fp32`` with poisoned outputs) on the CPU under the Triton
interpreter, patched by ``_interpreter.patch``; the default precision and, for FP8 inputs,
fast mode::

    TRITON_INTERPRET=1 python -m tests.triton_kernels._prefill_cases --seed 0 --n 4

Sq = 1 cases take the dense decode kernel, as on the GPU. One JSON line per case
(``error``: the failed check's message, else absent), then a summary.
"""

from __future__ import annotations

import argparse
import json
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n", type=int, default=4, help="cases")
    args = ap.parse_args()
    import triton  # noqa: F401  (the interpreter reads TRITON_INTERPRET when imported)

    from ._interpreter import patch

    patch()
    from ..gpu import test_attention_gpu as T

    T.DEV = "cpu"
    failed = 0
    for case in T._cases(args.n, args.seed):
        for precision in ("default", "fast") if case["dtype"] == T.FP8 else ("default",):
            record = {**{k: str(v) for k, v in case.items()}, "precision": precision}
            try:
                T.run_case(case, precision, config={})  # the Triton kernel, not the op's
            except AssertionError as exc:
                record["error"] = str(exc)[:500]
                failed += 1
            print(json.dumps(record), flush=True)
    print(json.dumps({"summary": {"cases": args.n, "failed": failed}}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
