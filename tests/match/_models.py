"""Shared builders for the match tests: a test-only multi-output op, and the candidates and
matches of probe rules (the small modules, exports and probe rules come from
``tests/_models.py``)."""

from __future__ import annotations

import torch
from torch import Tensor, fx

import graphfuse
from tests._models import (  # noqa: F401  (re-exported for the match tests)
    Fn,
    Program,
    Silu,
    dims,
    export,
    fake_input_graph,
    graph_module,
    matches,
    misses,
    probe,
    rules,
)

aten = torch.ops.aten

# --------------------------------------------------------------------------- test-only op
# A custom op with two outputs, in a namespace of its own (tests/core registers gftest::).

if not hasattr(torch.ops, "gfmatch") or not hasattr(torch.ops.gfmatch, "minmax"):

    @torch.library.custom_op("gfmatch::minmax", mutates_args=())
    def _minmax(x: Tensor) -> tuple[Tensor, Tensor]:
        return x.amin(-1), x.amax(-1)

    @_minmax.register_fake
    def _minmax_fake(x: Tensor) -> tuple[Tensor, Tensor]:
        shape = x.shape[:-1]
        return x.new_empty(shape), x.new_empty(shape)


gfmatch = torch.ops.gfmatch


def candidates(
    rule_set: graphfuse.RuleSet, graph: fx.Graph
) -> list[tuple[graphfuse.Rule, fx.Node]]:
    """Every (rule, node) where a rule's first pattern may be rooted, found through the rule
    set's index of root targets, each pair once, in graph order."""
    pairs = {
        (rule, node): None
        for target, by_target in rule_set.roots()
        for node in graph.find_nodes(op="call_function", target=target)
        for rule in by_target
    }
    return sorted(pairs, key=lambda rn: rn[1]._sort_key)
