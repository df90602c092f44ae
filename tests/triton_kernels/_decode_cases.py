"""The paged decode kernel's seeded cases (``tests/gpu/test_paged_decode_gpu.py``: FP8 and
bf16 KV caches, split-KV on and off, register prefetch, wide / FP8 / NVFP4 outputs against
``paged_decode_fp32`` with poisoned outputs) on the CPU under the Triton interpreter, patched
by ``_interpreter.patch`` (which computes the FP8 V conversion's inline asm with torch)::

    TRITON_INTERPRET=1 python -m tests.triton_kernels._decode_cases --seed 0 --n 4

One JSON line per case (``error``: the failed check's message, else absent), then a summary.
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
    from ..gpu import test_paged_decode_gpu as T

    T.DEV = "cpu"
    failed = 0
    for case in T._cases(args.n, args.seed):
        record = {k: str(v) for k, v in case.items()}
        try:
            T.run_case(case)
        except AssertionError as exc:
            record["error"] = str(exc)[:500]
            failed += 1
        print(json.dumps(record), flush=True)
    print(json.dumps({"summary": {"cases": args.n, "failed": failed}}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
