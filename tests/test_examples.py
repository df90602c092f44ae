"""The examples run as scripts and tell their story: writing a rule, and the
pattern-authoring walkthrough (a near miss explained, fixed, then matching both IRs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _run(script: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=EXAMPLES.parent,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_write_a_rule_runs():
    out = _run("write_a_rule.py").stdout
    lines = out.splitlines()
    assert lines[0] == "example: fp8_quant=1; 0 near miss(es)"
    assert "torch.ops.example.fp8_quant.default" in out
    assert lines[-1] == "outputs agree"


def test_authoring_walkthrough_runs():
    out = _run("authoring_walkthrough.py").stdout
    assert "v1 rewrites: {'tanh_gelu': 0}" in out
    assert "near miss: rule tanh_gelu at" in out
    assert "v2 (pre-dispatch): {'tanh_gelu': 1} ['aten.gelu.default']" in out
    assert "v2 (core ATen): {'tanh_gelu': 1} ['aten.gelu.default']" in out
