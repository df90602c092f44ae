"""The planned sweep's ``blocked`` set is what its conditions need: every removed node and
every user of one (``_Sweep._remove`` adds only the roots' users, relying on the escape
check for the intermediates'), and the per-target cache of ``_Mentions`` answers as
``RuleSet.mentions`` does."""

from __future__ import annotations

import pytest
import torch

from graphfuse import _plan as plan
from graphfuse._program import graph_module_of
from graphfuse._runner import _reserved_frame

from ._plan_workloads import chain, chain_rules, demo, random_program

aten = torch.ops.aten


def _users_of(nodes) -> set:
    return {u for n in nodes for u in n.users}


@pytest.mark.parametrize(
    "program, rules",
    [
        (lambda: chain("export", 3), lambda: chain_rules("export")),
        (lambda: chain("core", 3), lambda: chain_rules("core")),
        (lambda: chain("inductor", 3), lambda: chain_rules("inductor")),
        (lambda: demo("fp8", False), lambda: chain_rules("export")),
        (lambda: random_program(0, True), lambda: chain_rules("export")),
    ],
    ids=["export", "core", "inductor", "demo", "random0"],
)
def test_blocked_is_the_removed_nodes_and_their_users(program, rules) -> None:
    graph = graph_module_of(program()).graph
    sweep = plan._Sweep(rules(), None)
    _reserved_frame(sweep.run, graph)
    assert sweep.matches
    assert sweep.blocked == sweep.removed | _users_of(sweep.removed)
    # and every matched node's users outside its match are the root's (or asserts)
    for m in sweep.matches:
        outside = _users_of(n for n in m.nodes if n is not m.root) - m.node_set
        assert outside <= sweep.removed


def test_mentions_cache_answers_as_the_rule_set() -> None:
    rules = chain_rules("core")
    seen = plan._Mentions(rules)
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    unmentioned = graph.call_function(aten.cosh.default, (x,))
    seen.check([unmentioned, unmentioned], rules.rules[-1])
    assert not seen.full_sweep
    assert seen.named[id(aten.cosh.default)] == (aten.cosh.default, False)
    # a target a pattern names: a full sweep after, and a fallback for a rule visited later
    named = next(r for r in rules if r.name == "fp8_static_quant")  # (div: priority 0)
    mentioned = graph.call_function(aten.div.Tensor, (x, x))
    assert rules.mentions(aten.div.Tensor)
    with pytest.raises(plan._Fallback):
        seen.check([mentioned], rules.rules[0])
    assert seen.full_sweep
    assert seen.named[id(aten.div.Tensor)] == (aten.div.Tensor, True)
    with pytest.raises(plan._Fallback):  # (answered from the cache)
        seen.check([unmentioned, mentioned], named)


def test_node_equality_is_identity() -> None:
    """``_plan._apply`` tests "the rewrite returned a node it created" with ``in`` (one
    scan, no generator): that is an identity test only while fx.Node keeps object's ==."""
    assert torch.fx.Node.__eq__ is object.__eq__
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    a = graph.call_function(aten.relu.default, (x,))
    b = graph.call_function(aten.relu.default, (x,))  # same op, same argument
    assert b not in [a] and a in [b, a]


def test_hooked_reads_the_owning_module() -> None:
    from graphfuse._fxedit import _hooked

    gm = torch.fx.symbolic_trace(torch.nn.ReLU())
    names = ("_create_node_hooks", "_erase_node_hooks", "_replace_hooks")
    assert not any(_hooked(gm.graph, h) for h in names)
    gm._register_create_node_hook(lambda node: None)
    gm._register_erase_node_hook(lambda node: None)
    gm._register_replace_node_hook(lambda old, new, user: None)
    assert all(_hooked(gm.graph, h) for h in names)
    assert not _hooked(torch.fx.Graph(), "_create_node_hooks")  # no owning module

    class Owned(torch.fx.Graph):  # a graph class with its own idea of its owner
        @property
        def owning_module(self):
            return gm

    assert _hooked(Owned(), "_erase_node_hooks")
