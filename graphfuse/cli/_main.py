"""``main(argv) -> int``: parse, dispatch to one subcommand, turn errors into one line.

Errors: one line on stderr starting ``graphfuse: error:``, exit 1 (2 for usage errors), no
traceback (set ``GRAPHFUSE_DEBUG=1`` to see one for unexpected errors).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence
from typing import NoReturn

from . import _apply, _demo, _explain, _inspect, _patterns

PROG = "graphfuse"


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line, exit 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{PROG}: error: {message} (see '{self.prog} --help')\n")
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    """The ``graphfuse`` argument parser with every subcommand."""
    parser = _Parser(
        prog=PROG,
        description="Rewrite PyTorch exported programs with declarative fusion rules.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for module in (_apply, _inspect, _explain, _patterns, _demo):
        module.add_parser(sub)
    return parser


def _one_line(text: str) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return lines[0] if lines else ""


def _fail(message: str) -> int:
    sys.stderr.write(f"{PROG}: error: {message}\n")
    sys.stderr.flush()
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code.

    Args:
        argv: arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        0 on success (also when no rule matched), 1 on errors, 2 on usage errors.
    """
    from .._errors import GraphfuseError

    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2)
        return int(e.code or 0)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=FutureWarning)
            warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\..*")
            return int(args.run(args))
    except GraphfuseError as e:
        return _fail(_one_line(str(e)) or type(e).__name__)
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: error: interrupted\n")
        return 130
    except BrokenPipeError:
        return 1
    except Exception as e:
        if os.environ.get("GRAPHFUSE_DEBUG"):
            raise
        detail = _one_line(str(e))
        return _fail(
            f"unexpected {type(e).__name__}"
            + (f": {detail}" if detail else "")
            + " (set GRAPHFUSE_DEBUG=1 for the traceback)"
        )
