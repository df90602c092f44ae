"""A match with several roots puts its replacement before the earliest root, so an input
that comes after that root must not depend on a root (a cycle) and otherwise needs a
reordering the rewriter does not do: either way the rewrite is refused, the graph
unchanged. The dependency search stays between the earliest root and the latest input,
never walking the graph in front of the match."""

from __future__ import annotations

import pytest
import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode

from graphfuse import Rule
from graphfuse import dsl as P
from graphfuse.match import Failure, Match
from graphfuse.rewrite import FakePropagator, apply_match

aten = torch.ops.aten
PREFIX = 2000


def _graph() -> tuple[fx.Graph, dict[str, fx.Node]]:
    """A 2,000-node prefix, then r1 = relu(a), mid = sin(r1) (depends on r1),
    other = cos(a) (does not), r2 = add(mid, other)."""
    with FakeTensorMode():
        val = torch.empty(4)
    g = fx.Graph()
    a = g.placeholder("a")
    for _ in range(PREFIX):
        a = g.call_function(aten.neg.default, (a,))
    r1 = g.call_function(aten.relu.default, (a,))
    mid = g.call_function(aten.sin.default, (r1,))
    other = g.call_function(aten.cos.default, (a,))
    r2 = g.call_function(aten.add.Tensor, (mid, other))
    g.output((r1, r2))
    nodes = {"a": a, "r1": r1, "mid": mid, "other": other, "r2": r2}
    for n in g.nodes:
        n.meta["val"] = val
    return g, nodes


def _never(m, b):
    raise AssertionError("a refused rewrite never runs")


RULE = Rule("two_roots", (P.op(aten.relu, P.tensor("x")), P.op(aten.add, P._, P._)), _never)


@pytest.mark.parametrize(
    ("late", "why"),
    [
        ("mid", "the rewrite would create a cycle through relu_default"),
        ("other", "input cos_default comes after relu_default; needs reordering"),
    ],
)
def test_a_late_input_refuses_the_rewrite_looking_only_past_the_first_root(
    monkeypatch: pytest.MonkeyPatch, late: str, why: str
) -> None:
    g, n = _graph()
    m = Match(RULE, (n["r1"], n["r2"]), {"x": n["a"], "y": n[late]}, {}, {}, {}, [n["r1"], n["r2"]])
    before = [(x.name, x.target, x.args) for x in g.nodes]

    touched: list[fx.Node] = []
    original = fx.Node.all_input_nodes

    def spy(self: fx.Node) -> list[fx.Node]:
        touched.append(self)
        return original.fget(self)  # type: ignore[union-attr]

    monkeypatch.setattr(fx.Node, "all_input_nodes", property(spy))
    got = apply_match(m, g, FakePropagator())
    monkeypatch.undo()
    assert isinstance(got, Failure) and str(got) == why
    assert [(x.name, x.target, x.args) for x in g.nodes] == before
    g.lint()
    prefix_end = n["a"]
    assert all(x._sort_key > prefix_end._sort_key for x in touched), [x.name for x in touched]
    assert len(touched) <= 4
