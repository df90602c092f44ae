"""The examples run as scripts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_write_a_rule_runs():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "write_a_rule.py")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "example: fp8_quant=1; 0 near miss(es)"
    assert "torch.ops.example.fp8_quant.default" in proc.stdout
    assert lines[-1] == "outputs agree"
