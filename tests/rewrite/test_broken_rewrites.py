"""A broken rewrite (it raises, builds a value of another shape or dtype, returns the wrong
number of nodes or a node of another graph, or reads a node its match removes) leaves the
graph as it was (every node it created is erased again, the program handed to ``apply`` is
untouched) and skips its match with a near miss whose one line says what broke; the other
matches are rewritten. ``apply_match`` itself raises ``RewriteError``."""

from __future__ import annotations

import pytest
import torch
from torch import fx

import graphfuse
from graphfuse import dsl as P
from graphfuse.io import copy_graph
from graphfuse.match import match_rule
from graphfuse.rewrite import FakePropagator, apply_match
from graphfuse.run import run_rules
from tests._models import Silu, export, graph_code, rules, targets

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
def test_broken_rewrites_leave_the_graph_alone_with_a_near_miss(rewrite, message):
    ep = export(Silu(), (torch.randn(3, 8),))
    rs = rules(graphfuse.Rule("bad", SILU, rewrite))
    graph = copy_graph(ep)
    before = graph.python_code("self").src
    names = sorted(graph._graph_namespace._used_names)
    n_nodes = len(graph.nodes)
    report = run_rules(graph, rs)
    assert report.counts == {"bad": 0}
    (miss,) = report.near_misses
    prefix = message.split(": ", 1)[0]  # "rule bad at mul" or "rule bad"
    assert miss.rule == "bad" and miss.node == "mul"
    assert miss.reason.endswith(message.split(": ", 1)[1]), miss.reason
    assert miss.reason.startswith("the rewrite failed") and prefix not in miss.reason
    assert graph.python_code("self").src == before and len(graph.nodes) == n_nodes
    graph.lint()
    # (the names the erased nodes took stay taken, as fx's erase_node leaves them)
    assert set(names) <= graph._graph_namespace._used_names
    result = graphfuse.apply(ep, rs)
    assert result.report.counts == {"bad": 0} and len(result.report.near_misses) == 1
    assert graph_code(ep) == before
    # the rewriter itself raises, with the rule and the node
    fresh = copy_graph(ep)
    (rule,) = rs
    m = match_rule(rule, next(n for n in fresh.nodes if n.name == "mul"))
    with pytest.raises(graphfuse.RewriteError) as err:
        apply_match(m, fresh, FakePropagator())
    assert str(err.value) == message
    assert fresh.python_code("self").src == before


def test_a_broken_rewrite_skips_only_its_own_match():
    """Two SiLUs, a rewrite that fails on the first only: the second is still rewritten."""

    class TwoSilus(torch.nn.Module):
        def forward(self, x, y):
            return x * torch.sigmoid(x), y * torch.sigmoid(y)

    def rewrite(m, b):
        if m["x"].name == "x":
            raise ValueError("not this one")
        return b.call(aten.silu.default, m["x"])

    ep = export(TwoSilus(), (torch.randn(3, 8), torch.randn(3, 8)))
    result = graphfuse.apply(ep, rules(graphfuse.Rule("half", SILU, rewrite)))
    assert result.report.counts == {"half": 1}
    (miss,) = result.report.near_misses
    assert miss.node == "mul" and miss.reason == (
        "the rewrite failed, so the match was left as it is: "
        "the rewrite raised ValueError: not this one"
    )
    assert targets(result.program).count(aten.silu.default) == 1
    x, y = torch.randn(3, 8), torch.randn(3, 8)
    want, got = ep.module()(x, y), result.program.module()(x, y)
    assert all(torch.allclose(a, b) for a, b in zip(want, got))


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
