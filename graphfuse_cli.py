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


def _command(
    sub: argparse._SubParsersAction, name: str, summary: str, description: str, examples: str
) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` shows ``description`` and ``examples`` as written."""
    return sub.add_parser(
        name,
        help=summary,
        description=description,
        epilog="examples:\n" + examples,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``graphfuse`` argument parser; each subcommand sets ``command`` to its name."""
    parser = _Parser(
        prog=PROG,
        description="Rewrite PyTorch exported programs with declarative fusion rules.",
        epilog="'graphfuse COMMAND --help' describes a command and shows examples.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = _command(
        sub,
        "apply",
        "fuse what the rule sets match; write OUT",
        "Apply rule sets to an exported program and write the rewritten program to OUT.\n"
        "IN is never modified; OUT and the report are written only when everything\n"
        "succeeded. Prints how often each rule fired. --dry-run changes and writes no\n"
        "program: it lists every match that would fire (rule, root node, the nodes it\n"
        "removes, where the rule is defined). -v adds that list for a real run and each\n"
        "rule's cost: candidates tried, time matching them, rejects, rewrites.",
        "  graphfuse apply model.pt2 -o fused.pt2\n"
        "  graphfuse apply model.pt2 -o fused.pt2 -p trtllm -p my_rules.py --verify\n"
        "  graphfuse apply model.pt2 -o fused.pt2 --json report.json\n"
        "  graphfuse apply model.pt2 --dry-run -p my_rules.py --json matches.json\n"
        "  graphfuse apply model.pt2 -o fused.pt2 -v",
    )
    p.add_argument("file", metavar="IN.pt2", help="the exported program (never modified)")
    p.add_argument(
        "-o", "--output", metavar="OUT.pt2", help="where to write the result (not with --dry-run)"
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="rewrite nothing, write no program: list every match that would fire",
    )
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also list every match that fired and each rule's time (match, rewrite)",
    )
    _rules_option(p, _RULES_HELP)
    p.add_argument("--json", dest="report", metavar="REPORT.json", help="write the report")
    p.add_argument(
        "--verify", action="store_true", help="run both programs on random inputs and compare"
    )
    _program_options(p)

    p = _command(
        sub,
        "inspect",
        "what is in a program: inputs, outputs, op histogram",
        "Show what an exported program holds: its inputs and outputs, weights and a\n"
        "histogram of the ops it calls (graphfuse ops marked); or its graph as code (the\n"
        "spelling a rule is written against); or one node with its arguments and\n"
        "neighbours; or what changed from OLD to FILE, op counts or node by node.",
        "  graphfuse inspect model.pt2\n"
        "  graphfuse inspect model.pt2 --graph\n"
        "  graphfuse inspect model.pt2 --node to_3\n"
        "  graphfuse inspect fused.pt2 --diff model.pt2\n"
        "  graphfuse inspect fused.pt2 --diff model.pt2 --nodes",
    )
    p.add_argument("file", metavar="FILE.pt2", help="an exported program (.pt2)")
    p.add_argument(
        "--graph", action="store_true", help="print the graph as code, one line per node"
    )
    p.add_argument("--node", metavar="NAME", help="one node: its arguments, inputs and users")
    p.add_argument(
        "--diff", metavar="OLD.pt2", help="what disappeared from OLD and appeared in FILE"
    )
    p.add_argument(
        "--nodes",
        action="store_true",
        help="with --diff: the nodes removed and added around each fused op",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    _program_options(p)

    p = _command(
        sub,
        "explain",
        "near misses: where rules got partway, and why",
        "Match the rule sets against a program without changing it and list, per rule,\n"
        "every place where it got partway and the condition that failed, as one\n"
        "sentence with the model's source line; the most telling first (a whole match\n"
        "its check refused, then the deepest partial matches). --all also lists the\n"
        "matches that would fire. With --node NAME: every rule tried at\n"
        "that node, its pattern as a tree with what each part matched, the point where\n"
        "matching stopped marked, and the reason.",
        "  graphfuse explain model.pt2\n"
        "  graphfuse explain model.pt2 -p my_rules.py --json\n"
        "  graphfuse explain model.pt2 --all\n"
        "  graphfuse explain model.pt2 --node to_3\n"
        "  graphfuse explain model.pt2 -p my_rules.py --node to_3 --rule my_quant",
    )
    p.add_argument("file", metavar="FILE.pt2", help="an exported program (.pt2)")
    _rules_option(p, _RULES_HELP)
    p.add_argument("--node", metavar="NAME", help="explain every rule tried at this node")
    p.add_argument("--all", action="store_true", help="also list the matches that would fire")
    p.add_argument(
        "--rule",
        metavar="RULE",
        help="with --node: only this rule (tried even if rooted elsewhere)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    _program_options(p)

    p = _command(
        sub,
        "patterns",
        "list rule sets and their rules",
        "List rule sets (every bundled one, or those given with -p) with their rules,\n"
        "one-line docs and the file:line where each rule is defined. With --show RULE:\n"
        "that rule's pattern as an indented tree, its check and where it is defined.",
        "  graphfuse patterns\n"
        "  graphfuse patterns -p my_rules.py --json\n"
        "  graphfuse patterns --show fp8_static_quant\n"
        "  graphfuse patterns -p my_rules.py --show rmsnorm",
    )
    _rules_option(p, "list these rule sets (default: every bundled one)")
    p.add_argument(
        "--show", metavar="RULE", help="one rule: its pattern as a tree, its check, its source"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")

    _command(
        sub,
        "demo",
        "fuse a small decoder (FP8 and NVFP4 out) and compare",
        "Export a small Llama-style decoder with FP8 and NVFP4 attention outputs, fuse it\n"
        "with the bundled rules, and show what fired, the agreement with the unfused\n"
        "program and the speed of both.",
        "  graphfuse demo",
    )
    return parser


def _check_combinations(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors argparse cannot see: options that only work together or alone."""
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    command = sub.choices[args.command]
    if args.command == "apply":
        if args.dry_run and (args.output or args.verify):
            given = "-o" if args.output else "--verify"
            command.error(f"--dry-run writes and runs no program; leave out {given}")
        if not args.dry_run and not args.output:
            command.error("the following arguments are required: -o/--output (or --dry-run)")
    if args.command == "explain" and args.rule is not None and args.node is None:
        command.error("--rule needs --node NAME")
    if args.command == "inspect":
        views = [
            o
            for o, on in (
                ("--graph", args.graph),
                ("--node", args.node is not None),
                ("--diff", args.diff is not None),
            )
            if on
        ]
        if len(views) > 1:
            command.error(f"{' and '.join(views)} are separate views; give one")
        if args.nodes and args.diff is None:
            command.error("--nodes needs --diff OLD.pt2")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code.

    Args:
        argv: arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        0 on success (also when no rule matched), 1 on errors, 2 on usage errors.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        _check_combinations(parser, args)
    except SystemExit as e:  # --help (0) or a usage error (2)
        return int(e.code or 0)
    from graphfuse.cli import run_command

    return run_command(args)


if __name__ == "__main__":
    sys.exit(main())
