"""``graphfuse explain FILE.pt2 --node NAME [--rule RULE]``: every rule tried at one node,
with its pattern as a tree, what each place matched, where matching stopped, and why
(plain data; the renderer draws it)."""

from __future__ import annotations

from typing import Any

from torch import fx

from .. import dsl
from ..rules import Rule, RuleSet
from ..rules.rule import anchor_targets, subpatterns
from . import _tree
from ._common import CliError, where
from ._graphinfo import close_names, code_line, source_line


def _rooted_here(rule: Rule, node: fx.Node) -> bool:
    t = node.target
    targets = anchor_targets(rule.patterns[0])
    return t in targets or getattr(t, "overloadpacket", None) in targets


def tried(rules: RuleSet, node: fx.Node, rule_name: str | None) -> list[Rule]:
    """The rules a sweep tries at ``node`` (rooted at its op), in sweep order (priority,
    then the set's order); with ``rule_name``, that rule alone, wherever it is rooted."""
    if rule_name is not None:
        try:
            return [rules[rule_name]]
        except KeyError:
            raise CliError(
                f"rule set {rules.name} has no rule {rule_name!r}; "
                f"its rules: {', '.join(r.name for r in rules)}"
            ) from None
    if node.op != "call_function":
        return []
    here = [r for r in rules if _rooted_here(r, node)]
    return sorted(here, key=lambda r: -r.priority)


def _outcome(attempt: Any) -> tuple[str, str]:
    """(kind, sentence) of an attempt: ``match``, ``check`` / ``escape`` (a full structural
    match refused), ``structure`` (where the pattern stopped) or ``none``."""
    if attempt.match is not None:
        return "match", "matches: " + ", ".join(n.name for n in attempt.match.nodes)
    failure = attempt.failure
    if failure is None:
        return "none", "no way to match the pattern here (nothing got partway)"
    if not attempt.structural:
        kind = "escape" if failure.kind == "escape" else "check"
        return kind, str(failure)
    return "structure", str(failure)


def explain_node(
    ep: Any, rules: RuleSet, name: str, rule_name: str | None, path: str
) -> dict[str, Any]:
    """Every rule tried at node ``name`` of ``ep`` as plain data (``rules`` a list of
    ``{rule, where, priority, outcome, reason, rows}``; ``rows`` the explained tree)."""
    from ..match.explain import explain_candidate

    node = next((n for n in ep.graph.nodes if n.name == name), None)
    if node is None:
        near = close_names(ep, name)
        hint = f"; similar: {', '.join(near)}" if near else ""
        raise CliError(f"{path}: no node named {name!r}{hint}")
    out: dict[str, Any] = {
        "node": name,
        "code": code_line(node),
        "source": source_line(node),
        "rule_set": rules.name,
        "rules": [],
        "elsewhere": [],
    }
    for rule in tried(rules, node, rule_name):
        attempt = explain_candidate(rule, node)
        kind, reason = _outcome(attempt)
        failed = attempt.failure.node if kind in ("check", "escape") else None
        rows = _tree.explained(_tree.rule_trees(rule.patterns), attempt.located, failed)
        out["rules"].append(
            {
                "rule": rule.name,
                "where": where(rule.location),
                "priority": rule.priority,
                "outcome": kind,
                "reason": reason,
                "rows": [vars(r) for r in rows],
            }
        )
    if not out["rules"]:
        out["elsewhere"] = _elsewhere(rules, node)
    return out


def _elsewhere(rules: RuleSet, node: fx.Node) -> list[dict[str, Any]]:
    """For a node no rule is rooted at: each rule's roots, and whether its pattern uses
    the node's op inside (then the node is matched from a root above it)."""
    t = node.target if node.op == "call_function" else None
    rows = []
    for rule in rules:
        inside = t is not None and any(
            isinstance(p, (dsl.Call, dsl.Maybe))
            and (t in p.targets or getattr(t, "overloadpacket", None) in p.targets)
            for p in subpatterns(rule.patterns)
        )
        roots = sorted({dsl.target_repr(x) for x in anchor_targets(rule.patterns[0])})
        rows.append({"rule": rule.name, "roots": roots, "uses_this_op": inside})
    return rows
