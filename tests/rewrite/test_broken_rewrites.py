"""A broken rewrite (it raises, builds a value of another shape or dtype, returns the wrong
number of nodes or a node of another graph, or reads a node its match removes) raises
``RewriteError`` with one line naming the rule and the node, and leaves the graph as it
was: every node it created is erased again, the program handed to ``apply`` is untouched."""

from __future__ import annotations

import pytest
import torch
from torch import fx

import graphfuse
from graphfuse import dsl as P
from graphfuse.io import copy_graph
from graphfuse.run import run_rules
from tests._models import Silu, export, graph_code, rules

aten = torch.ops.aten
X = P.tensor("x")
SILU = P.op(aten.mul, X, P.op(aten.sigmoid, X), commutative=True)


def _raises(m, b):
    b.call(aten.relu.default, m["x"])
    raise ValueError("no kernel for this shape")


def _wrong_shape(m, b):
    return b.call(aten.sum.dim_IntList, m["x"], [0])


def _wrong_dtype(m, b):
    return b.call(aten._to_copy.default, b.call(aten.silu.default, m["x"]), dtype=torch.float16)


def _two_nodes(m, b):
    return b.call(aten.silu.default, m["x"]), b.call(aten.silu.default, m["x"])


def _uses_removed(m, b):
    return b.call(aten.mul.Tensor, m.root.args[1], m["x"])


def _foreign(m, b):
    b.call(aten.silu.default, m["x"])
    g = fx.Graph()
    return g.placeholder("elsewhere")


@pytest.mark.parametrize(
    ("rewrite", "message"),
    [
        (_raises, "rule bad at mul: the rewrite raised ValueError: no kernel for this shape"),
        (_wrong_shape, "rule bad at mul: the replacement has shape [8] where the graph had [3, 8]"),
        (
            _wrong_dtype,
            "rule bad at mul: the replacement has dtype torch.float16 where the graph had "
            "torch.float32",
        ),
        (
            _two_nodes,
            "rule bad: the rewrite must return 1 node(s), one per root; "
            "got (silu_default, silu_default_1)",
        ),
        (
            _uses_removed,
            "rule bad at mul: the replacement uses sigmoid, which the match removes; bind it as "
            "an input instead",
        ),
        (_foreign, "rule bad at mul: the rewrite returned elsewhere, a node of another graph"),
    ],
)
def test_broken_rewrites_raise_and_leave_the_graph_alone(rewrite, message):
    ep = export(Silu(), (torch.randn(3, 8),))
    rs = rules(graphfuse.Rule("bad", SILU, rewrite))
    graph = copy_graph(ep)
    before = graph.python_code("self").src
    names = sorted(graph._graph_namespace._used_names)
    n_nodes = len(graph.nodes)
    with pytest.raises(graphfuse.RewriteError) as err:
        run_rules(graph, rs)
    assert str(err.value) == message
    assert graph.python_code("self").src == before and len(graph.nodes) == n_nodes
    graph.lint()
    # (the names the erased nodes took stay taken, as fx's erase_node leaves them)
    assert set(names) <= graph._graph_namespace._used_names
    with pytest.raises(graphfuse.RewriteError, match="^rule bad"):
        graphfuse.apply(ep, rs)
    assert graph_code(ep) == before


def test_a_raising_check_names_the_rule_and_the_node() -> None:
    """A check that raises becomes a one-line RewriteError naming the rule and the node."""

    def check(m: graphfuse.Match) -> None:
        return 1 / 0

    rule = graphfuse.Rule(
        "divides",
        P.op(torch.ops.aten.mul.Tensor, P.tensor("x"), P.op(torch.ops.aten.sigmoid, P.tensor("x"))),
        lambda m, b: b.call(torch.ops.aten.silu.default, m["x"]),
        check,
    )
    ep = export(Silu(), (torch.randn(4),))
    with pytest.raises(graphfuse.RewriteError, match=r"rule divides at mul: the check raised"):
        graphfuse.apply(ep, graphfuse.RuleSet("r", [rule]))
