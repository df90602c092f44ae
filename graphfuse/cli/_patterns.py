"""``graphfuse patterns [-p FILE]... [--show RULE] [--json]``: rule sets, their rules, where
defined; one rule's pattern as a tree, its check and its source."""

from __future__ import annotations

import argparse
import difflib
import inspect
import json
from typing import Any

from . import _render, _tree
from ._common import CliError, console, where

SOURCE_LINES = 40  # the most lines of a check's source that --show prints


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
                "location": where(r.location),
            }
            for r in rs.rules
        ]
        sets.append({"name": rs.name, "rules": rules})
    return sets


def _function(fn: Any) -> dict[str, Any]:
    """A check or rewrite function: its name, ``file:line`` and source lines."""
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    if getattr(fn, "__module__", "") == "graphfuse.rules.trace":
        return {"name": "the traced replacement (traced_rule)", "location": "", "source": []}
    try:
        lines, first = inspect.getsourcelines(fn)
        location = where((inspect.getsourcefile(fn) or "", first))
    except (OSError, TypeError):
        return {"name": name, "location": "", "source": []}
    return {"name": name, "location": location, "source": [ln.rstrip() for ln in lines]}


def find_rule(names: list[str], rule_name: str) -> tuple[Any, Any]:
    """(rule set, rule) of the first rule named ``rule_name`` in the sets ``names``."""
    from ..rules import bundled_names, load_patterns

    known = []
    for name in names or bundled_names():
        rs = load_patterns(name)
        for rule in rs.rules:
            if rule.name == rule_name:
                return rs, rule
            known.append(rule.name)
    near = difflib.get_close_matches(rule_name, known, n=3)
    hint = f"; similar: {', '.join(near)}" if near else ""
    sets = ", ".join(names) if names else "the bundled rule sets"
    raise CliError(f"no rule named {rule_name!r} in {sets}{hint}")


def show(names: list[str], rule_name: str) -> dict[str, Any]:
    """One rule as plain data: where it is defined, its roots, its pattern (code and tree
    lines), its check and rewrite functions."""
    from .. import dsl
    from ..rules.rule import anchor_targets

    rs, rule = find_rule(names, rule_name)
    trees = _tree.rule_trees(rule.patterns)
    return {
        "rule": rule.name,
        "rule_set": rs.name,
        "location": where(rule.location),
        "priority": rule.priority,
        "doc": rule.doc,
        "roots": sorted({dsl.target_repr(t) for t in anchor_targets(rule.patterns[0])}),
        "pattern": repr(rule.pattern),
        "tree": _tree.shown(trees, 10_000),
        "check": _function(rule.check) if rule.check is not None else None,
        "rewrite": _function(rule.rewrite),
        "trees": trees,
    }


def run(args: argparse.Namespace) -> int:
    """Run ``graphfuse patterns``; returns the exit code."""
    if args.show is not None:
        info = show(args.patterns, args.show)
        if args.json:
            print(json.dumps({k: v for k, v in info.items() if k != "trees"}, indent=2))
        else:
            _render.render_rule(console(), info)
        return 0
    sets = describe(args.patterns)
    if args.json:
        print(json.dumps(sets, indent=2))
    else:
        _render.render_patterns(console(), sets)
    return 0
