"""``graphfuse inspect FILE.pt2 [--node NAME] [--diff OTHER.pt2] [--json]``."""

from __future__ import annotations

import argparse
import json

from . import _graphinfo, _render
from ._common import CliError, console, load


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
