"""The pattern-authoring walkthrough in examples/ runs and tells its story."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "authoring_walkthrough.py"


def test_authoring_walkthrough_runs():
    out = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "v1 rewrites: {'tanh_gelu': 0}" in out.stdout
    assert "near miss: rule tanh_gelu at" in out.stdout
    assert "v2 (pre-dispatch): {'tanh_gelu': 1} ['aten.gelu.default']" in out.stdout
    assert "v2 (core ATen): {'tanh_gelu': 1} ['aten.gelu.default']" in out.stdout
