"""``graphfuse explain FILE.pt2 [-p ...] [--all] [--node NAME [--rule RULE]] [--json]``: why
rules did not fire (near misses, the most telling first; or every rule tried at one node)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from . import _render
from ._apply import fired_row
from ._common import console, load, rule_set
from ._graphinfo import relative_frame


def group_near_misses(near_misses: list[Any]) -> dict[str, list[dict[str, str]]]:
    """Near misses grouped by rule (in first-seen order), each with its source line."""
    groups: dict[str, list[dict[str, str]]] = {}
    for miss in near_misses:
        source = relative_frame(miss.source_line()) if hasattr(miss, "source_line") else ""
        groups.setdefault(miss.rule, []).append(
            {
                "node": miss.node,
                "target": getattr(miss, "target", ""),
                "reason": miss.reason,
                "source": source,
            }
        )
    return groups


def run(args: argparse.Namespace) -> int:
    """Run ``graphfuse explain``; returns the exit code."""
    from .. import api

    rules = rule_set(args)
    ep = load(args.file, args)
    if args.node is not None:
        from ._explain_node import explain_node

        info = explain_node(ep, rules, args.node, args.rule, args.file)
        if args.json:
            print(json.dumps(info, indent=2))
        else:
            _render.render_explain_node(console(), info)
        return 0
    report = api.explain(ep, rules)
    groups = group_near_misses(report.near_misses)
    fired = [fired_row(f) for f in report.fired] if args.all else None
    if args.json:
        out: dict[str, Any] = {"rule_set": report.rule_set, "near_misses": groups}
        if fired is not None:
            out["fired"] = fired
        print(json.dumps(out, indent=2))
        return 0
    _render.render_explain(console(), report.rule_set, groups)
    if fired is not None:
        _render.render_fired(console(), fired, dry_run=True)
    return 0
