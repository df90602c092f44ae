"""Pieces every subcommand shares: program-loading options, rule sets, consoles."""

from __future__ import annotations

import argparse
import os
from typing import TextIO

import torch
from rich.console import Console

from ..errors import GraphfuseError


class CliError(GraphfuseError):
    """A command-line problem found by the CLI itself (exit 1, one line)."""


def load(path: str, args: argparse.Namespace) -> torch.export.ExportedProgram:
    """Load ``path`` with the command's ``--import`` / ``--trust`` options."""
    from ..io import load_program

    return load_program(path, trust=args.trust, imports=args.imports)


def rule_set(args: argparse.Namespace):
    """The rule set named by the ``-p`` options (their sum), ``trtllm`` by default."""
    from ..rules import load_patterns

    names = args.patterns or ["trtllm"]
    rules = load_patterns(names[0])
    for name in names[1:]:
        rules = rules + load_patterns(name)
    return rules


def console(file: TextIO | None = None, *, stderr: bool = False) -> Console:
    """A console for the command's output (width from COLUMNS, color only on a terminal)."""
    width = None
    if os.environ.get("COLUMNS", "").isdigit():
        width = int(os.environ["COLUMNS"])
    return Console(file=file, stderr=stderr, width=width, highlight=False, soft_wrap=False)


def where(location: tuple[str, int]) -> str:
    """``file:line``, relative to the folder above the graphfuse sources when inside it,
    else to the current folder when inside that."""
    path, line = location
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # graphfuse/
    for base in (os.path.dirname(package), os.getcwd()):
        if path and os.path.abspath(path).startswith(base + os.sep):
            path = os.path.relpath(path, base)
            break
    return f"{path}:{line}"
