"""Patterns hidden inside higher-order ops, for ``explain``.

A higher-order op (``torch.ops.higher_order.wrap_with_set_grad_enabled``, ``wrap_with_autocast``,
``cond`` ...) calls a subgraph that export keeps as a submodule; rules run on the graph they
are given, never inside those subgraphs. Export wraps every ``torch.no_grad()`` block of a
model in ``wrap_with_set_grad_enabled`` unless the whole export runs under ``torch.no_grad()``
(quantization libraries put their quants in such blocks), so a quant that would fuse is
invisible. :func:`hidden_matches` finds where a rule's pattern matches inside such a
subgraph and says how to export so that it does not.
"""

from __future__ import annotations

import torch
from torch import fx

from ..match import match_rule
from ..rules import RuleSet
from .report import NearMiss

_FIXES = {
    "wrap_with_set_grad_enabled": "export under torch.no_grad() so that no-grad blocks stay inline",
    "wrap_with_autocast": "export without torch.autocast (cast the model to the dtype instead)",
}


def _submodule(gm: torch.nn.Module, target: str) -> object:
    value: object = gm
    for part in target.split("."):
        value = getattr(value, part, None)
    return value


def hidden_matches(graph: fx.Graph, rules: RuleSet) -> list[NearMiss]:
    """A near miss, at the higher-order op's node, for each (rule, node) of a subgraph the
    op calls where the rule's pattern matches (its check may pass or fail); nested
    higher-order ops are searched too. Needs the graph's owning module (the program's
    graph, as ``explain`` reads it); a graph without one has nothing to report."""
    gm = graph.owning_module
    if gm is None:
        return []
    out: list[NearMiss] = []
    for attr in graph.find_nodes(op="get_attr"):
        sub = _submodule(gm, str(attr.target))
        if not isinstance(sub, fx.GraphModule):
            continue
        for hop in attr.users:
            if not isinstance(hop.target, torch._ops.HigherOrderOperator):
                continue
            name = hop.target.name()
            where = f"inside {hop.name} (torch.ops.higher_order.{name}, subgraph {attr.target})"
            fix = f": {_FIXES[name]}" if name in _FIXES else ""
            tail = f"{where}; graphfuse does not rewrite inside higher-order ops{fix}"
            target, trace = f"higher_order.{name}", hop.meta.get("stack_trace") or ""
            for rule, node in _matched(sub.graph, rules):
                reason = f"the pattern matches at {node.name} {tail}"
                out.append(NearMiss(rule.name, hop.name, reason, target, trace))
        out += hidden_matches(sub.graph, rules)
    return out


def _matched(graph: fx.Graph, rules: RuleSet) -> list[tuple[object, fx.Node]]:
    found = []
    for target, by_target in rules.roots():
        for node in graph.find_nodes(op="call_function", target=target):
            found += [(rule, node) for rule in by_target if match_rule(rule, node) is not None]
    return found
