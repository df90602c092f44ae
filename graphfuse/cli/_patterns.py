"""``graphfuse patterns [-p FILE]... [--json]``: rule sets, their rules, where defined."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from . import _render
from ._common import console


def _where(location: tuple[str, int]) -> str:
    """``file:line``, relative to the folder above the graphfuse sources when inside it."""
    path, line = location
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # graphfuse/
    base = os.path.dirname(package)
    if path and os.path.abspath(path).startswith(base + os.sep):
        path = os.path.relpath(path, base)
    return f"{path}:{line}"


def describe(names: list[str]) -> list[dict[str, Any]]:
    """Each rule set as ``{name, rules: [{name, doc, location}]}``."""
    from ..rules import bundled_names, load_patterns

    sets = []
    for name in names or bundled_names():
        rs = load_patterns(name)
        rules = [
            {
                "name": r.name,
                "doc": (r.doc or "").strip().splitlines()[0] if r.doc else "",
                "location": _where(r.location),
            }
            for r in rs.rules
        ]
        sets.append({"name": rs.name, "rules": rules})
    return sets


def run(args: argparse.Namespace) -> int:
    """Run ``graphfuse patterns``; returns the exit code."""
    sets = describe(args.patterns)
    if args.json:
        print(json.dumps(sets, indent=2))
    else:
        _render.render_patterns(console(), sets)
    return 0
