"""The Triton norm / activation + quant kernels under the Triton CPU interpreter, against
graphfuse/ops/norm_act_ref.py (small seeded cases, poisoned outputs; see
``tests/triton_kernels/_norm_act_cases.py``). Skips where Triton is not installed (CI).

The interpreter reads ``TRITON_INTERPRET`` when Triton is imported, so the cases run in a
subprocess that sets it first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[2]
N = 10  # cases per op family and seed


@pytest.mark.parametrize("seed", [0, 1])
def test_norm_act_kernels_interpreted(seed: int) -> None:
    module = "tests.triton_kernels._norm_act_cases"
    cmd = [sys.executable, "-m", module, "--device", "cpu", "--small",
           "--n", str(N), "--seed", str(seed)]  # fmt: skip
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    bad = [r for r in records if r.get("failures")]
    assert proc.returncode == 0 and not bad, (proc.stderr[-4000:], bad)
    assert records[-1]["summary"]["cases"] == 2 * N + 6
