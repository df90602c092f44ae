"""The nodes a rewrite leaves: named by fx's namespace, placed before the match's earliest
root, carrying the root's source metadata and a fake value; the graph afterwards is the one
fx's own calls (``create_node``, ``replace_all_uses_with``, ``erase_node``) leave, users in
the same order, whatever order the match lists its nodes in; the owning module's node hooks
see every edit; and nothing of a rewritten graph outlives it."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode

import graphfuse
from graphfuse import Rule
from graphfuse import dsl as P
from graphfuse.io import copy_graph
from graphfuse.match import Match, match_rule
from graphfuse.rewrite import FakePropagator, apply_match
from graphfuse.run import run_rules
from tests._models import Silu, export, rules

aten = torch.ops.aten
X = P.tensor("x")
SILU = P.op(aten.mul, X, P.op(aten.sigmoid, X), commutative=True)


def to_silu(m, b):
    return b.call(aten.silu.default, m["x"])


def test_new_nodes_carry_meta():
    ep = export(Silu(), (torch.randn(3, 8),))
    (old,) = [n for n in ep.graph.nodes if n.target is aten.mul.Tensor]
    res = graphfuse.apply(ep, rules(Rule("silu", SILU, to_silu)))
    (new,) = [n for n in res.program.graph.nodes if n.target is aten.silu.default]
    assert old.meta["stack_trace"] and old.meta["nn_module_stack"]
    for key in ("stack_trace", "nn_module_stack", "source_fn_stack", "torch_fn"):
        assert new.meta.get(key) == old.meta.get(key), key
    assert isinstance(new.meta["val"], torch.Tensor)
    assert new.meta["val"].shape == old.meta["val"].shape


def _state(g: fx.Graph) -> tuple:
    """Everything fx keeps about a graph's nodes: order, names, args, users in order, the
    op index, the names taken."""
    table = {k: [n.name for n in v] for k, v in g._find_nodes_lookup_table.table.items() if v}
    return (
        [(n.name, n.op, n.target, str(n.args), str(n.kwargs)) for n in g.nodes],
        [[u.name for u in n.users] for n in g.nodes],
        len(g.nodes),
        table,
        sorted(g._graph_namespace._used_names),
    )


def _small(val: torch.Tensor) -> tuple[fx.Graph, list[fx.Node]]:
    """x -> relu -> neg -> add(neg, x) -> output; neg carries a stack trace."""
    g = fx.Graph()
    x = g.placeholder("x")
    a = g.call_function(aten.relu.default, (x,))
    b = g.call_function(aten.neg.default, (a,))
    out = g.call_function(aten.add.Tensor, (b, x))
    g.output(out)
    for n in (x, a, b, out):
        n.meta["val"] = val
    b.meta["stack_trace"] = "here"
    return g, [x, a, b, out]


def _sigmoid_of_x(m, b):
    return b.call(aten.sigmoid.default, m["x"])


NEG_RELU = Rule("r", P.op(aten.neg.default, P.op(aten.relu.default, X)), _sigmoid_of_x)


def test_a_rewrite_leaves_what_fx_calls_leave():
    """One rewrite through apply_match, and the same edit by hand with fx's calls."""
    with FakeTensorMode():
        val = torch.empty(2, 3)
    g, (x, a, b, out) = _small(val)
    m = match_rule(NEG_RELU, b)
    assert isinstance(m, Match)
    created = apply_match(m, g, FakePropagator())
    assert isinstance(created, list) and len(created) == 1
    g.lint()
    (new,) = created
    assert new.name == "sigmoid_default" and new.meta["stack_trace"] == "here"
    assert new.meta["val"].shape == (2, 3)

    ref, (x2, a2, b2, out2) = _small(val)
    with ref.inserting_before(b2):
        made = ref.create_node("call_function", aten.sigmoid.default, (x2,), {})
    b2.replace_all_uses_with(made)
    ref.erase_node(b2)
    ref.erase_node(a2)
    assert _state(g) == _state(ref)


@pytest.mark.parametrize("order", [[2, 1], [1, 2]])
def test_the_matched_nodes_go_whatever_order_the_match_lists_them_in(order):
    with FakeTensorMode():
        val = torch.empty(2, 3)
    g, nodes = _small(val)
    m = match_rule(NEG_RELU, nodes[2])
    assert isinstance(m, Match) and m.nodes == [nodes[2], nodes[1]]
    listed = Match(m.rule, m.roots, m.binds, m.tags, m.dims, m.chains, [nodes[i] for i in order])
    apply_match(listed, g, FakePropagator())
    g.lint()
    assert [n.name for n in g.nodes] == ["x", "sigmoid_default", "add_tensor", "output"]


def test_new_names_follow_the_names_taken():
    """A graph that already uses the names new calls would get: fx's next free names."""
    with FakeTensorMode():
        val = torch.empty(2, 3)
    g, (x, a, b, out) = _small(val)
    for name in ("sigmoid_default", "sigmoid_default_1", "abs_default_2"):
        with g.inserting_before(out):
            taken = g.call_function(aten.exp.default, (x,))
        taken._rename(name)
        assert taken.name == name
        taken.meta["val"] = val

    def two(m, bld):
        s = bld.call(aten.sigmoid.default, m["x"])
        bld.call(aten.abs.default, s)  # unused: erased by nobody, kept by the graph
        return bld.call(aten.sigmoid.default, s)

    rule = Rule("two", P.op(aten.neg.default, P.op(aten.relu.default, X)), two)
    m = match_rule(rule, b)
    created = apply_match(m, g, FakePropagator())
    assert [n.name for n in created] == ["sigmoid_default_2", "abs_default", "sigmoid_default_3"]
    g.lint()


def test_the_owning_modules_hooks_see_every_edit():
    ep = export(Silu(), (torch.randn(3, 8),))
    gm = ep.module()
    seen: list[tuple] = []
    gm._register_create_node_hook(lambda n: seen.append(("create", n.name)))
    gm._register_replace_node_hook(lambda old, new, user: seen.append(("replace", old.name, new)))
    gm._register_erase_node_hook(lambda n: seen.append(("erase", n.name)))
    report = run_rules(gm.graph, rules(Rule("silu", SILU, to_silu)))
    assert report.counts == {"silu": 1}
    mul = next(e[1] for e in seen if e[0] == "erase" and e[1].startswith("mul"))
    assert seen[0] == ("create", "silu_default")
    assert ("replace", mul, "silu_default") in seen
    assert sorted(e[1] for e in seen if e[0] == "erase") == sorted([mul, "sigmoid"])


def test_nothing_of_a_rewritten_graph_outlives_it():
    ep = export(Silu(), (torch.randn(3, 8),))
    graph = copy_graph(ep)
    assert run_rules(graph, rules(Rule("silu", SILU, to_silu))).counts == {"silu": 1}
    res = graphfuse.apply(ep, rules(Rule("silu", SILU, to_silu)))
    refs = [weakref.ref(graph), weakref.ref(res.program.graph)]
    del graph, res
    gc.collect()
    assert [r() for r in refs] == [None, None]
