"""``graphfuse inspect FILE.pt2 [--graph | --node NAME | --diff OLD.pt2 [--nodes]] [--json]``."""

from __future__ import annotations

import argparse
import json

from . import _graphinfo, _render
from ._common import CliError, console, load


def run(args: argparse.Namespace) -> int:
    """Run ``graphfuse inspect``; returns the exit code."""
    ep = load(args.file, args)
    out = console()
    if args.graph:
        lines = _graphinfo.graph_code(ep)
        if args.json:
            print(json.dumps({"code": lines}, indent=2))
        else:
            _render.render_graph(out, args.file, lines)
        return 0
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
        old = load(args.diff, args)
        delta = _graphinfo.diff(_graphinfo.summary(old), info)
        if args.nodes:
            from ._nodediff import node_diff

            delta["hunks"] = node_diff(old, ep)
        if args.json:
            print(json.dumps(delta, indent=2))
        else:
            _render.render_diff(out, args.diff, args.file, delta)
            if args.nodes:
                _render.render_hunks(out, delta["hunks"])
        return 0
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        _render.render_summary(out, args.file, info)
    return 0
