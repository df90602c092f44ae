"""The rewriter's fast paths do exactly what the slow ones do: node creation and erasure
(``_fxedit``) leave the graph as fx's ``create_node`` / ``erase_node`` would, the fake-value
cache tells apart what the op's fake impl would, the per-node ``normalize`` cache notices
edits, and leaf patterns matched inline bind what the traced path binds."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode

import graphfuse._fxedit as fxedit
import graphfuse._matcher as matcher
from graphfuse import Rule
from graphfuse import dsl as P
from graphfuse._fake import FakePropagator
from graphfuse._match import Match
from graphfuse._match_rule import match_rule
from graphfuse._matcher import _Tracer
from tests.core._models import fake_input_graph

aten = torch.ops.aten


def _keep(m: Match, b: object) -> fx.Node:
    return m.root


def _graph() -> tuple[fx.Graph, list[fx.Node]]:
    g = fx.Graph()
    x, y = g.placeholder("x"), g.placeholder("y")
    a = g.call_function(aten.mul.Tensor, (x, y))
    b = g.call_function(aten.add.Tensor, (a, x), {"alpha": 2})
    c = g.call_function(aten.relu.default, (b,))
    g.output(c)
    return g, [x, y, a, b, c]


def _state(g: fx.Graph) -> tuple:
    """Everything fx keeps about a graph's nodes: order, names, args, users, side table."""
    nodes = list(g.nodes)
    table = {
        key: [n.name for n in group]
        for key, group in g._find_nodes_lookup_table.table.items()
        if group
    }
    return (
        [(n.name, n.op, n.target, str(n.args), str(n.kwargs)) for n in nodes],
        [sorted(u.name for u in n.users) for n in nodes],
        len(g.nodes),
        table,
        sorted(g._graph_namespace._used_names),
    )


def test_create_call_is_create_node() -> None:
    """Same name (namespace), position (insert point), args, users and side table."""
    states = []
    for create in (
        lambda g, *a: g.create_node("call_function", *a),
        fxedit.create_call,
    ):
        g, (x, y, a, b, c) = _graph()
        with g.inserting_before(b):
            n1 = create(g, aten.mul.Tensor, (a, 3.0), {})
            create(g, aten.add.Tensor, (n1, y), {"alpha": 1})
        g.lint()
        states.append(_state(g))
    assert states[0] == states[1]
    names = [name for name, *_ in states[1][0]]
    assert names[2:5] == ["mul_tensor", "mul_tensor_1", "add_tensor_1"], names


def test_create_call_falls_back_for_symbolic_arguments() -> None:
    """An argument create_node would scan (not a plain value) goes through fx itself, so
    its warning about raw SymInts is kept."""
    g, (x, y, a, b, c) = _graph()
    seen = []
    real = g.create_node

    def spy(*args: object, **kwargs: object) -> fx.Node:
        seen.append(args)
        return real(*args, **kwargs)

    g.create_node = spy  # type: ignore[method-assign]
    with g.inserting_before(c):
        fxedit.create_call(g, aten.mul.Tensor, (a, 2), {})
        assert not seen
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fxedit.create_call(g, aten.mul.Tensor, (a, {"odd": 1}), {})
    assert len(seen) == 1


def test_erase_is_erase_node() -> None:
    states = []
    for fast in (False, True):
        g, (x, y, a, b, c) = _graph()
        g.output_node().args = (x,)
        if fast:
            fxedit.erase(g, [c, b, a])
        else:
            for n in (c, b, a):
                g.erase_node(n)
        assert a._erased and b._erased and c._erased
        assert not x.users.keys() - {g.output_node()} and not y.users
        g.lint()
        states.append(_state(g))
    assert states[0] == states[1]


def test_erase_unused_only_skips_nodes_still_used() -> None:
    g, (x, y, a, b, c) = _graph()
    fxedit.erase(g, [a], unused_only=True)  # b still reads a
    assert not a._erased
    with pytest.raises(RuntimeError, match="still had"):
        fxedit.erase(g, [a])  # fx's own error
    g.lint()


def test_erase_runs_the_owning_modules_hooks() -> None:
    g, (x, y, a, b, c) = _graph()
    g.output_node().args = (x,)
    gm = fx.GraphModule(torch.nn.Module(), g)
    erased: list[str] = []
    gm._register_erase_node_hook(lambda n: erased.append(n.name))
    fxedit.erase(gm.graph, [c, b])
    assert erased == [c.name, b.name]


def test_fake_cache_keys_on_metadata() -> None:
    """Same metadata -> one fake-impl call; a different dtype, shape, stride or scalar
    -> a new one; a node without ``meta["val"]`` -> no value."""
    with FakeTensorMode():
        t = torch.empty(2, 3)
        same = torch.empty(2, 3)
        other_dtype = torch.empty(2, 3, dtype=torch.bfloat16)
        transposed = torch.empty(3, 2).t()
    g = fx.Graph()
    nodes = [g.placeholder(f"p{i}") for i in range(5)]
    for node, val in zip(nodes, (t, same, other_dtype, transposed)):
        node.meta["val"] = val
    fake = FakePropagator()
    out = fake(aten.mul.Tensor, (nodes[0], 2.0), {})
    assert tuple(out.shape) == (2, 3) and out.dtype == torch.float32
    assert fake(aten.mul.Tensor, (nodes[1], 2.0), {}) is out
    assert (fake.misses, fake.hits) == (1, 1)
    assert fake(aten.mul.Tensor, (nodes[2], 2.0), {}).dtype == torch.bfloat16
    assert fake(aten.mul.Tensor, (nodes[3], 2.0), {}).stride() == transposed.stride()
    fake(aten.mul.Tensor, (nodes[0], 3.0), {})
    assert fake.misses == 4
    assert fake(aten.cat.default, ([nodes[0], nodes[1]], 0), {}).shape[0] == 4
    assert fake(aten.cat.default, ([nodes[0], nodes[4]], 0), {}) is None
    assert fake(aten.mul.Tensor, (nodes[4], 2.0), {}) is None


def test_normalize_cache_notices_an_edit() -> None:
    """One ``norm`` dict serves a whole run: an entry is used only while the node's args
    are the objects it was made from."""
    g, (x, y, a, b, c) = _graph()
    rule = Rule("r", P.op(aten.add.Tensor, P.op(aten.mul.Tensor, P.tensor("p"), P._), P._), _keep)
    norm: dict = {}
    first = match_rule(rule, b, None, norm)
    assert isinstance(first, Match) and first["p"] is x
    with g.inserting_before(b):
        z = g.call_function(aten.mul.Tensor, (y, x))
    b.args = (z, x)
    again = match_rule(rule, b, None, norm)
    assert isinstance(again, Match) and again["p"] is y


def test_inline_leaves_bind_what_the_traced_path_binds() -> None:
    """Literals, captures, typed captures and lists are matched inline (no continuation)
    on the fast path; the bindings, dims and visit count equal the traced path's."""
    g, x, _ = fake_input_graph(2, 8, 4)
    perm = g.call_function(aten.permute.default, (x, [0, 2, 1]))
    out = g.call_function(aten.mul.Tensor, (perm, 0.5))
    g.output(out)
    pat = P.op(
        aten.mul.Tensor,
        P.op(aten.permute.default, P.tensor("x", shape=("B", "S", "D")), [0, 2, 1]),
        P.scalar("c"),
    )
    rule = Rule("r", pat, _keep)
    results = []
    for tracer in (None, _Tracer()):
        before = matcher.VISITS[0]
        m = match_rule(rule, out, tracer)
        assert isinstance(m, Match)
        results.append((m.binds, m.dims, m.nodes, matcher.VISITS[0] - before))
    assert results[0] == results[1]
    assert results[0][1] == {"B": 2, "S": 8, "D": 4}
    wrong = Rule("w", P.op(aten.mul.Tensor, P._, P.lit(0.25)), _keep)
    assert match_rule(wrong, out) is None
