"""The Triton NVFP4 quant kernel under the Triton CPU interpreter at extreme global scales,
byte for byte against ``graphfuse/ops/quant_ref.py`` (see ``_quant_cases.py``). Skips where
Triton is not installed (CI). Runs in a subprocess: the interpreter reads
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


def test_nvfp4_quant_extreme_global_scales_interpreted() -> None:
    cmd = [sys.executable, "-m", "tests.triton_kernels._quant_cases"]
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    bad = [r for r in records if r.get("bad_bytes")]
    assert proc.returncode == 0 and not bad, (proc.stderr[-4000:], bad)
    assert records[-1]["summary"]["cases"] == 28
