"""``graphfuse inspect FILE.pt2 [--node NAME] [--diff OTHER.pt2] [--json]``."""

from __future__ import annotations

import argparse
import json

from . import _graphinfo, _render
from ._common import CliError, add_program_options, console, load


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="what is in a program: inputs, outputs, op histogram")
    p.add_argument("file", metavar="FILE.pt2", help="an exported program (.pt2)")
    p.add_argument("--node", metavar="NAME", help="show one node's neighbourhood")
    p.add_argument("--diff", metavar="OTHER.pt2", help="what disappeared / appeared in OTHER")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    add_program_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run ``graphfuse inspect``; returns the exit code."""
    ep = load(args.file, args)
    out = console()
    if args.node is not None:
        info = _graphinfo.neighbourhood(ep, args.node)
        if info is None:
            near = _graphinfo.close_names(ep, args.node)
            hint = f"; similar: {', '.join(near)}" if near else ""
            raise CliError(f"{args.file}: no node named {args.node!r}{hint}")
        if args.json:
            print(json.dumps(info, indent=2))
        else:
            _render.render_node(out, info)
        return 0
    info = _graphinfo.summary(ep)
    if args.diff is not None:
        other = _graphinfo.summary(load(args.diff, args))
        delta = _graphinfo.diff(info, other)
        if args.json:
            print(json.dumps(delta, indent=2))
        else:
            _render.render_diff(out, args.file, args.diff, delta)
        return 0
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        _render.render_summary(out, args.file, info)
    return 0
