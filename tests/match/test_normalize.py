"""Schema normalisation: positional vs keyword, defaults filled, negative dims canonical."""

from __future__ import annotations

import pytest
import torch
from torch import fx

from graphfuse import dsl as P
from graphfuse.match.args import arg_index, arg_spec, normalize

from ._models import aten, export, matches, misses


def _spellings(x):
    a = torch.softmax(x, -1)
    b = torch.softmax(x, dim=3)
    c = x.sum(-1, keepdim=True) + x.sum(dim=[3], keepdim=True)
    d = torch.cat([x, x], dim=-1).sum(-1, keepdim=True) + torch.cat([x, x], 3).sum(3, keepdim=True)
    return a + b + c + d


@pytest.fixture(scope="module")
def eps():
    x = (torch.randn(2, 3, 4, 5),)
    return {"pre": export(_spellings, x), "decomposed": export(_spellings, x, decompose=True)}


def _nodes(ep, target):
    return [n for n in ep.graph.nodes if n.target is target]


def test_softmax_spellings_normalise_alike(eps):
    a, b = _nodes(eps["pre"], aten.softmax.int)
    assert a.args[1] == -1 and b.args[1] == 3  # the graph keeps the user's spelling
    assert normalize(a)[1:] == normalize(b)[1:] == [3, None]  # default dtype filled
    for pat in (
        P.op(aten.softmax.int, P.tensor("x"), -1),
        P.op(aten.softmax.int, P.tensor("x"), 3),
        P.op(aten.softmax.int, P.tensor("x"), dim=-1),
        P.op(aten.softmax.int, self=P.tensor("x"), dim=3),
        P.op(aten.softmax.int, P.tensor("x"), 3, None),  # the default, spelled out
    ):
        assert len(matches(eps["pre"], pat)) == 2, pat
    assert matches(eps["pre"], P.op(aten.softmax.int, P._, 2)) == []
    assert matches(eps["pre"], P.op(aten.softmax.int, P._, -2)) == []
    assert matches(eps["pre"], P.op(aten.softmax.int, P._, dtype=torch.float16)) == []


def test_list_dims_and_tensor_lists_are_canonical(eps):
    for ep in eps.values():
        sums = matches(ep, P.op(aten.sum.dim_IntList, P._, [-1], True))
        assert len(sums) == 4
        assert all(normalize(m.root)[1] == [3] for m in sums)
        assert len(matches(ep, P.op(aten.cat, P._, -1))) == 2
        assert len(matches(ep, P.op(aten.cat, P._, dim=3))) == 2
        assert matches(ep, P.op(aten.cat, P._, 2)) == []


def test_decomposed_softmax_normalises(eps):
    (m1, m2) = matches(eps["decomposed"], P.op(aten._softmax, P._, -1, False))
    assert normalize(m1.root)[1] == 3


def test_keyword_arguments_in_the_graph():
    """Exports pass arguments positionally; a hand-edited graph may use names."""
    ep = export(lambda x: torch.softmax(x, -1), (torch.randn(2, 3),))
    gm = ep.graph_module
    (node,) = _nodes(ep, aten.softmax.int)
    x = node.args[0]
    with gm.graph.inserting_after(node):
        kw = gm.graph.call_function(aten.softmax.int, (), {"self": x, "dim": -1})
    kw.meta["val"] = node.meta["val"]
    assert normalize(kw) == normalize(node) == [x, 1, None]
    (m,) = [m for m in matches(gm, P.op(aten.softmax.int, P.tensor("x"), 1)) if m.root is kw]
    assert m["x"] is x


def test_unknown_keyword_is_a_near_miss():
    ep = export(lambda x: torch.relu(torch.softmax(x, -1)), (torch.randn(2, 3),))
    pat = P.op(aten.relu, P.op(aten.softmax.int, P._, axis=1))
    assert misses(ep, pat) == ["rule probe at softmax: softmax has no argument 'axis'"]


def test_arg_spec():
    spec = arg_spec(aten.transpose.int)
    assert spec.names == ("self", "dim0", "dim1") and spec.dim_args == {1, 2}
    assert arg_spec(aten.sum.dim_IntList).dim_args == {1}
    assert arg_index(aten.softmax.int, "dim") == 1 and arg_index(aten.softmax.int, "x") is None
    assert arg_spec(torch.add) is None


def test_python_callables_are_not_normalised():
    g = fx.Graph()
    x = g.placeholder("x")
    n = g.call_function(torch.relu, (x,))
    assert normalize(n) == [x]
