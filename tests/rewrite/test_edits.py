"""The graph edits of a rewrite leave the graph as fx's public methods would, and keep fx's
bookkeeping (node list, length, names, op index, users) consistent."""

from __future__ import annotations

import operator

import pytest
import torch
from torch import fx

import graphfuse
from graphfuse.rewrite import edits
from tests._chain import link, tile, traced

aten = torch.ops.aten


def _bookkeeping(g: fx.Graph) -> None:
    """fx's own views of the graph agree with its node list."""
    g.lint()
    nodes = list(g.nodes)
    assert len(g.nodes) == sum(1 for _ in g.nodes)  # fx's count against a walk
    for target in {n.target for n in nodes if n.op == "call_function"}:
        indexed = g.find_nodes(op="call_function", target=target)
        assert indexed == [n for n in nodes if n.op == "call_function" and n.target == target]
    for n in nodes:
        for inp in n.all_input_nodes:
            assert n in inp.users
        for user in n.users:
            assert user in nodes and n in user.all_input_nodes


@pytest.mark.parametrize("ir", ["export", "core"])
def test_apply_builds_the_same_graph_with_fx_public_methods(
    ir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    gm = tile(traced(link, ir), 6)
    direct = graphfuse.apply(gm, "trtllm").program
    monkeypatch.setattr(edits, "DIRECT", False)
    public = graphfuse.apply(gm, "trtllm").program
    assert direct.code == public.code
    assert direct.code.count("graphfuse.attention_fp8") == 6
    _bookkeeping(direct.graph)


def _line() -> tuple[fx.Graph, list[fx.Node]]:
    g = fx.Graph()
    x = g.placeholder("x")
    a = g.call_function(aten.relu.default, (x,))
    b = g.call_function(aten.neg.default, (a,))
    c = g.call_function(aten.add.Tensor, (b, x), {"alpha": 2})
    g.output(c)
    return g, [x, a, b, c]


@pytest.mark.parametrize("direct", [True, False])
def test_add_call_and_erase_keep_bookkeeping(direct: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(edits, "DIRECT", direct)
    g, (x, a, b, c) = _line()
    with g.inserting_before(c):
        new = edits.add_call(g, aten.sigmoid.default, (x,), {})
        twin = edits.add_call(g, aten.sigmoid.default, (new,), {})
    assert (new.name, twin.name) == ("sigmoid_default", "sigmoid_default_1")
    assert list(g.nodes).index(twin) == list(g.nodes).index(c) - 1
    c.replace_input_with(b, twin)
    edits.erase(g, [b, a])
    assert a._erased and b._erased and not x.users.keys() & {a, b}
    names = ["x", "sigmoid_default", "sigmoid_default_1", "add_tensor", "output"]
    assert [n.name for n in g.nodes] == names
    _bookkeeping(g)
    x_ = torch.randn(5)
    out = fx.GraphModule(torch.nn.Module(), g)(x_)
    torch.testing.assert_close(out, torch.sigmoid(torch.sigmoid(x_)) + 2 * x_)


def test_erase_refuses_a_node_still_used(monkeypatch: pytest.MonkeyPatch) -> None:
    g, (x, a, b, c) = _line()
    with pytest.raises(RuntimeError, match="still had 1 users"):
        edits.erase(g, [a])
    assert not a._erased and len(g.nodes) == 5
    _bookkeeping(g)


def test_edits_use_fx_methods_where_the_module_has_node_hooks() -> None:
    g, (x, a, b, c) = _line()
    gm = fx.GraphModule(torch.nn.Module(), g)
    seen: list[str] = []
    gm._register_create_node_hook(lambda n: seen.append(f"+{n.name}"))
    gm._register_erase_node_hook(lambda n: seen.append(f"-{n.name}"))
    with gm.graph.inserting_before(c):
        new = edits.add_call(gm.graph, operator.neg, (x,), {})
    c.replace_input_with(b, new)
    edits.erase(gm.graph, [b, a])
    assert seen == ["+neg", "-neg_default", "-relu_default"]
    _bookkeeping(gm.graph)
