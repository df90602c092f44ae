"""The ``graphfuse`` console script's argument grammar, outside the ``graphfuse`` package.

``import graphfuse`` imports torch and registers the ops (seconds); this module imports
neither, so ``graphfuse --help`` and usage errors answer at once. Once the arguments parse,
:func:`main` hands them to ``graphfuse.cli``, which imports the library and runs the
command.

Example::

    graphfuse apply model.pt2 -o fused.pt2 --json report.json
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

PROG = "graphfuse"


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line, exit 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{PROG}: error: {message} (see '{self.prog} --help')\n")
        sys.exit(2)


def _program_options(p: argparse.ArgumentParser) -> None:
    """``--import MODULE`` (repeatable) and ``--trust``, for commands that load a program."""
    p.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (registers custom ops / pytree types); repeatable",
    )
    p.add_argument(
        "--trust",
        action="store_true",
        help="load pickled parts that need unrestricted unpickling (runs code from the file)",
    )


def _rules_option(p: argparse.ArgumentParser, help: str) -> None:
    p.add_argument(
        "-p",
        "--patterns",
        dest="patterns",
        action="append",
        default=[],
        metavar="NAME_OR_FILE",
        help=help,
    )


_RULES_HELP = "rule set: a bundled name or a .py rule file (repeatable; default trtllm)"


def build_parser() -> argparse.ArgumentParser:
    """The ``graphfuse`` argument parser; each subcommand sets ``command`` to its name."""
    parser = _Parser(
        prog=PROG,
        description="Rewrite PyTorch exported programs with declarative fusion rules.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("apply", help="fuse what the rule sets match; write OUT")
    p.add_argument("file", metavar="IN.pt2", help="the exported program (never modified)")
    p.add_argument(
        "-o", "--output", required=True, metavar="OUT.pt2", help="where to write the result"
    )
    _rules_option(p, _RULES_HELP)
    p.add_argument("--json", dest="report", metavar="REPORT.json", help="write the report")
    p.add_argument(
        "--verify", action="store_true", help="run both programs on random inputs and compare"
    )
    _program_options(p)

    p = sub.add_parser("inspect", help="what is in a program: inputs, outputs, op histogram")
    p.add_argument("file", metavar="FILE.pt2", help="an exported program (.pt2)")
    p.add_argument("--node", metavar="NAME", help="show one node's neighbourhood")
    p.add_argument("--diff", metavar="OTHER.pt2", help="what disappeared / appeared in OTHER")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    _program_options(p)

    p = sub.add_parser("explain", help="near misses: where rules got partway, and why")
    p.add_argument("file", metavar="FILE.pt2", help="an exported program (.pt2)")
    _rules_option(p, _RULES_HELP)
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    _program_options(p)

    p = sub.add_parser("patterns", help="list rule sets and their rules")
    _rules_option(p, "list these rule sets (default: every bundled one)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")

    sub.add_parser("demo", help="fuse a small decoder (FP8 and NVFP4 out) and compare")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code.

    Args:
        argv: arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        0 on success (also when no rule matched), 1 on errors, 2 on usage errors.
    """
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2)
        return int(e.code or 0)
    from graphfuse.cli import run_command

    return run_command(args)


if __name__ == "__main__":
    sys.exit(main())
