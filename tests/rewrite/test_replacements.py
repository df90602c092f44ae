"""Replacements spliced into exported programs: one op for a subgraph in every IR (aten
and custom targets, dynamic shapes), several roots at once (multi-output ops in and out),
a getitem root, and what a rewrite may hand back instead of a new node (the root itself,
a node the match removes from under it, a bound input)."""

from __future__ import annotations

import operator

import pytest
import torch

import graphfuse
from graphfuse import dsl as P
from tests._models import (
    Silu,
    check_rewrite,
    dims,
    export,
    gftest,
    graph_code,
    randn,
    rules,
    targets,
)

aten = torch.ops.aten
X = P.tensor("x")
SILU = P.op(aten.mul, X, P.op(aten.sigmoid, X), commutative=True)
RELU_NEG = P.op(aten.relu, P.op(aten.neg, X))


def to_silu(m, b):
    """x * sigmoid(x) -> aten.silu"""
    return b.call(aten.silu.default, m["x"])


def to_custom_silu(m, b):
    return b.call(gftest.silu.default, m["x"])


@pytest.fixture(scope="module")
def silu_eps():
    x = (torch.randn(3, 8),)
    return {
        "pre": export(Silu(), x),
        "decomposed": export(Silu(swap=True), x, decompose=True),
        "dynamic": torch.export.export(Silu(), x, dynamic_shapes={"x": {0: dims("B")[0]}}),
    }


@pytest.mark.parametrize("kind", ["pre", "decomposed", "dynamic"])
@pytest.mark.parametrize(
    ("rewrite", "target"), [(to_silu, aten.silu.default), (to_custom_silu, gftest.silu.default)]
)
def test_silu_rewrite(silu_eps, kind, rewrite, target):
    ep = silu_eps[kind]
    rs = rules(graphfuse.Rule("silu", SILU, rewrite))
    rows = 5 if kind == "dynamic" else 3  # a new batch size for the dynamic export
    res = check_rewrite(ep, rs, lambda s: (randn(rows, 8, seed=s),), {"silu": 1})
    assert targets(res.program) == [target]


# ------------------------------------------------------------ several roots


def _pair(pattern_op, *extra):
    src = P.op(pattern_op, X, *extra)
    return (P.getitem(src, 0), P.getitem(src, 1))


def test_max_dim_to_a_custom_multi_output_op():
    ep = export(lambda x: x.max(dim=-1), (torch.randn(3, 5),))

    def rewrite(m, b):
        node = b.call(gftest.max_last.default, m["x"])
        return b.getitem(node, 0), b.getitem(node, 1)

    rs = rules(graphfuse.Rule("max_last", _pair(aten.max.dim, -1), rewrite))
    res = check_rewrite(ep, rs, lambda s: (randn(3, 5, seed=s),), {"max_last": 1})
    assert gftest.max_last.default in targets(res.program)
    assert aten.max.dim not in targets(res.program)


@pytest.mark.parametrize("decompose", [False, True])
def test_var_mean_to_two_nodes(decompose):
    ep = export(lambda x: torch.var_mean(x, dim=-1), (torch.randn(3, 5),), decompose=decompose)

    def rewrite(m, b):
        return (
            b.call(aten.var.correction, m["x"], [1], correction=1),
            b.call(aten.mean.dim, m["x"], [1]),
        )

    rs = rules(graphfuse.Rule("split_var_mean", _pair(aten.var_mean, [-1]), rewrite))
    res = check_rewrite(ep, rs, lambda s: (randn(3, 5, seed=s),), {"split_var_mean": 1})
    assert operator.getitem not in targets(res.program)


def test_custom_multi_output_op_rewritten_to_aten():
    ep = export(lambda x: gftest.minmax(x), (torch.randn(3, 5),))

    def rewrite(m, b):
        return b.call(aten.amin.default, m["x"], [-1]), b.call(aten.amax.default, m["x"], [-1])

    rs = rules(graphfuse.Rule("split_minmax", _pair(gftest.minmax), rewrite))
    res = check_rewrite(ep, rs, lambda s: (randn(3, 5, seed=s),), {"split_minmax": 1})
    assert targets(res.program) == [aten.amin.default, aten.amax.default]


@pytest.mark.parametrize("decompose", [False, True])
def test_a_getitem_root(decompose):
    """max(x, -1)[0] + 1, the root is the getitem. Pre-dispatch, export keeps the unused
    indices output (getitem_1, no users): a user of max outside the match, so a near
    miss; core ATen drops it, and max goes with the match."""
    ep = export(lambda x: x.max(dim=-1)[0] + 1, (torch.randn(3, 5),), decompose=decompose)
    rule = graphfuse.Rule(
        "max_value",
        P.getitem(P.op(aten.max.dim, X, -1), 0),
        lambda m, b: b.call(aten.amax.default, m["x"], [-1]),
    )
    fired = int(decompose)
    res = check_rewrite(ep, rules(rule), lambda s: (randn(3, 5, seed=s),), {"max_value": fired})
    if decompose:
        assert targets(res.program) == [aten.amax.default, aten.add.Tensor]
        assert not res.report.near_misses
    else:
        assert graph_code(res.program) == graph_code(ep)
        assert [str(nm) for nm in res.report.near_misses] == [
            "rule max_value at max_1: max_1 (aten.max.dim) is also used by getitem_1 "
            "(operator.getitem) outside the match"
        ]


# ------------------------------------------------------------ what a rewrite hands back


def _exp_over(x):
    return torch.exp(torch.relu(-x))


def _calls(program) -> list[str]:
    return [
        f"{n.target.__name__}{tuple(torch.fx.map_arg(n.args, lambda a: a.name))}"
        for n in program.graph.nodes
        if n.op == "call_function"
    ]


@pytest.mark.parametrize(
    ("returned", "calls"),
    [
        # the root itself: nothing to replace, and every matched node is still used
        ("root", ["neg.default('x',)", "relu.default('neg',)", "exp.default('relu',)"]),
        # the neg the match would remove: it stays, the relu goes
        ("intermediate", ["neg.default('x',)", "exp.default('neg',)"]),
        # a bound input: the whole match goes
        ("input", ["exp.default('x',)"]),
    ],
)
def test_a_rewrite_may_return_an_existing_node(returned, calls):
    pick = {
        "root": lambda m, b: m.root,
        "intermediate": lambda m, b: m.root.args[0],
        "input": lambda m, b: m["x"],
    }[returned]
    ep = export(_exp_over, (torch.randn(3, 4),))
    res = graphfuse.apply(ep, rules(graphfuse.Rule("keep", RELU_NEG, pick)))
    assert res.report.counts == {"keep": 1} and res.report.iterations == 2
    res.program.graph.lint()
    assert _calls(res.program) == calls
    if returned == "root":
        assert graph_code(res.program) == graph_code(ep)
