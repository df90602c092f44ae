"""Help and usage errors answer without importing torch (the grammar is torch-free)."""

from __future__ import annotations

import os
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


def _subcommands() -> dict[str, object]:
    import argparse

    import graphfuse_cli

    parser = graphfuse_cli.build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


@pytest.mark.parametrize("command", sorted(_subcommands()))
def test_every_command_help_has_a_description_and_examples(command: str) -> None:
    """``graphfuse CMD --help``: a description, then examples that the grammar accepts
    (and still no torch)."""
    import graphfuse_cli

    res = subprocess.run(
        [sys.executable, "-c", _PROBE, command, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert res.returncode == 0, res.stderr
    text = res.stdout
    usage, description = text.split("\n\n")[:2]
    assert usage.startswith(f"usage: graphfuse {command}")
    assert not description.startswith(("positional arguments:", "options:")), text
    assert len(description.split()) >= 8, text
    examples = text.split("\nexamples:\n")[1].strip().splitlines()
    assert examples, text
    for line in examples:
        argv = line.split()
        assert argv[:2] == ["graphfuse", command], line
        graphfuse_cli.build_parser().parse_args(argv[1:])  # exits 2 on a bad example
    assert max(len(line) for line in text.splitlines()) <= 80
