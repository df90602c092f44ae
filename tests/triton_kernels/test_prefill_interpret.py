"""The Triton prefill attention kernel under the Triton CPU interpreter, against
``graphfuse/ops/attention_ref.py`` (see ``tests/triton_kernels/_prefill_cases.py``). Skips
where Triton is not installed (CI). Runs in a subprocess: the interpreter reads
``TRITON_INTERPRET`` when Triton is imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("seed", [0, 1])
def test_prefill_attention_interpreted(seed: int) -> None:
    cmd = [sys.executable, "-m", "tests.triton_kernels._prefill_cases", "--seed", str(seed),
           "--n", "4"]  # fmt: skip
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    bad = [r for r in records if "error" in r]
    assert proc.returncode == 0 and not bad, (proc.stderr[-4000:], bad)
    assert records[-1]["summary"]["cases"] == 4
