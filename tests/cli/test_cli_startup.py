"""Help and usage errors answer without importing torch (the grammar is torch-free)."""

from __future__ import annotations

import subprocess
import sys

import pytest

_PROBE = """
import sys, graphfuse_cli
code = graphfuse_cli.main(sys.argv[1:])
assert "torch" not in sys.modules, "torch was imported"
assert "graphfuse" not in sys.modules, "graphfuse was imported"
sys.exit(code)
"""


@pytest.mark.parametrize(
    ("argv", "code", "stream", "text"),
    [
        (["--help"], 0, "stdout", "usage: graphfuse"),
        (["apply", "--help"], 0, "stdout", "--output"),
        ([], 2, "stderr", "graphfuse: error: the following arguments are required: COMMAND"),
        (["apply", "in.pt2"], 2, "stderr", "required: -o/--output"),
        (["frobnicate"], 2, "stderr", "invalid choice: 'frobnicate'"),
    ],
)
def test_help_and_usage_errors_skip_torch(argv, code, stream, text) -> None:
    res = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == code, res.stderr
    assert text in getattr(res, stream)
    if code == 2:
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr
