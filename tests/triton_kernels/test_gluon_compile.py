"""The warp-specialised Gluon prefill kernel compiles for sm_90 without a GPU (Triton's own
ptxas, ``benchmarks.sass_count``'s compile path), for both head dims, each output kind and
fast mode. A layout that does not fit a tile shape aborts the compiler (an LLVM error ends
the process), which a GPU run would otherwise be the first to show, so the compiles run in a
subprocess. Skips where Triton or its Gluon Hopper layer is not installed (the ``interpret``
extra).

The lazy running max (``gluon_kernel._softmax_step``) must be compiled in exactly where it is
meant to be, FP8 q / k / v in the default precision with an FP8 or NVFP4 output: its skipped
rescale is the only ``VOTE.ANY`` of the kernel."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("triton")
pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")

from ._runner import ROOT  # noqa: E402

# (head dim, q / k / v, output, fast mode)
CASES = [(d, inp, out, fast) for d in (64, 128) for inp, out, fast in
         (("bf16", "bf16", False), ("bf16", "fp8", False), ("fp8", "nvfp4", False),
          ("fp8", "fp8", False), ("fp8", "fp8", True))]  # fmt: skip

_SCRIPT = """
import sys, tempfile
from benchmarks.sass_count import compile_prefill
for d, inp, out, fast in {cases!r}:
    print(d, inp, out, fast, "...", flush=True)
    with tempfile.TemporaryDirectory() as w:
        sass, _, _ = compile_prefill(inp, out, w, d, fast)
    votes = sum(ins.startswith("VOTE.ANY") for ins in sass)
    print(d, inp, out, fast, len(sass), votes, flush=True)
"""


def test_gluon_prefill_compiles_for_sm90() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT.format(cases=CASES)], cwd=ROOT, capture_output=True,
        text=True, timeout=900,
    )  # fmt: skip
    done = [line.split() for line in proc.stdout.splitlines() if not line.endswith("...")]
    assert proc.returncode == 0, (proc.stdout[-500:], proc.stderr[-3000:])
    assert [(int(d), i, o, f == "True") for d, i, o, f, _, _ in done] == CASES
    assert all(int(n) > 1000 for *_, n, _ in done), done  # a whole kernel's SASS
    lazy = [i == "fp8" and o != "bf16" and f == "False" for _, i, o, f, _, _ in done]
    assert [int(v) > 0 for *_, v in done] == lazy, done
