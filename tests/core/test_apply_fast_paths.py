"""The rewriter's per-match fast paths leave what fx's own calls leave: names from
``create_call`` (its cached name parse), ``replace_uses`` (``replace_all_uses_with``),
``inserting_before``, ``erase`` in any order (the skipped nodes are returned and erased in a
second, sorted pass), and the fake-value cache keyed by the target's id."""

from __future__ import annotations

import pytest
import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx import graph as fx_graph

import graphfuse._fxedit as fxedit
from graphfuse import Rule
from graphfuse import dsl as P
from graphfuse._fake import FakePropagator
from graphfuse._match import Match
from graphfuse._match_rule import match_rule
from graphfuse._rewriter import _erase_matched, _same_value_type, apply_match

aten = torch.ops.aten

NAMES = [
    "mul", "mul", "mul_1", "mul_1", "add_3", "add", "add", "add_3", "add_2", "x.y", "x.y",
    "3d", "3d", "", "", "list", "list", "if", "print", "getitem", "getitem_7", "getitem",
    "attention_fp8.default", "attention_fp8.default", "a__b_02", "a__b_2", "_", "_1", "__",
]  # fmt: skip


def test_create_name_is_fx_create_name() -> None:
    """Same names and the same namespace state as ``_Namespace.create_name``, for repeats,
    numbered candidates, illegal characters, keywords and builtins."""
    assert fxedit._FAST_NAMES
    ours, theirs = fx_graph._Namespace(), fx_graph._Namespace()
    for round_ in range(3):
        for cand in NAMES:
            got = fxedit._create_name(ours, fxedit._parse_name(cand))
            assert got == theirs.create_name(cand, None), (round_, cand)
    assert ours._used_names == theirs._used_names
    assert ours._base_count == theirs._base_count


def _chain() -> tuple[fx.Graph, list[fx.Node]]:
    g = fx.Graph()
    x = g.placeholder("x")
    a = g.call_function(aten.relu.default, (x,))
    b = g.call_function(aten.neg.default, (a,))
    c = g.call_function(aten.mul.Tensor, (b, a))
    d = g.call_function(aten.add.Tensor, (c, x))
    g.output(d)
    return g, [x, a, b, c, d]


def _state(g: fx.Graph) -> tuple:
    table = {k: [n.name for n in v] for k, v in g._find_nodes_lookup_table.table.items() if v}
    return (
        [(n.name, n.op, n.target, str(n.args), str(n.kwargs)) for n in g.nodes],
        [[u.name for u in n.users] for n in g.nodes],
        len(g.nodes),
        table,
    )


def test_create_call_names_follow_existing_names() -> None:
    """A graph whose nodes already use the names a new call would get."""
    states = []
    for create in (lambda g, *a: g.create_node("call_function", *a), fxedit.create_call):
        g, (x, a, b, c, d) = _chain()
        with g.inserting_before(d):
            for _ in range(3):
                create(g, aten.relu.default, (c,), {})
                create(g, aten.mul.Tensor, (c, 2.0), {})
        g.lint()
        states.append(_state(g))
    assert states[0] == states[1]


def test_erase_in_any_order_returns_the_skipped() -> None:
    g, (x, a, b, c, d) = _chain()
    g.output_node().args = (x,)
    skipped = fxedit.erase(g, [a, b, c, d], unused_only=True)  # users last: all but d skipped
    assert skipped == [a, b, c] and d._erased and not c._erased
    assert fxedit.erase(g, [c, b, a], unused_only=True) == []
    assert all(n._erased for n in (a, b, c, d)) and list(x.users) == [g.output_node()]
    g.lint()
    assert len(g.nodes) == 2


def test_erase_matched_erases_a_match_listed_in_any_order() -> None:
    """The matched nodes go whatever order the match lists them in; the kept root stays."""
    results = []
    for order in ([3, 2, 1], [1, 2, 3], [2, 1, 3]):
        g, nodes = _chain()
        rule = Rule("r", P.op(aten.add.Tensor, P._, P.tensor("x")), lambda m, b: m.root)
        m = match_rule(rule, nodes[4])
        assert isinstance(m, Match)
        with g.inserting_before(nodes[4]):
            new_root = g.call_function(aten.sigmoid.default, (nodes[0],))
        nodes[4].replace_all_uses_with(new_root)
        m.nodes = [nodes[i] for i in order] + [nodes[4]]
        m.node_set = set(m.nodes)
        _erase_matched(m, g, (new_root,))
        g.lint()
        results.append(_state(g))
        assert [n.name for n in g.nodes] == ["x", "sigmoid_default", "output"]
    assert results[0] == results[1] == results[2]


def test_replace_uses_is_replace_all_uses_with() -> None:
    states = []
    for fast in (False, True):
        g, (x, a, b, c, d) = _chain()
        with g.inserting_before(b):
            new = g.call_function(aten.sigmoid.default, (x,))
        if fast:
            fxedit.replace_uses(g, a, new)
        else:
            a.replace_all_uses_with(new)
        assert not a.users
        states.append(_state(g))
    assert states[0] == states[1]


def test_replace_uses_runs_the_replace_hooks() -> None:
    g, (x, a, b, c, d) = _chain()
    gm = fx.GraphModule(torch.nn.Module(), g)
    seen: list[tuple[str, str, str]] = []
    gm._register_replace_node_hook(lambda old, new, user: seen.append((old.name, new, user.name)))
    with gm.graph.inserting_before(b):
        new = gm.graph.call_function(aten.sigmoid.default, (x,))
    fxedit.replace_uses(gm.graph, a, new)
    assert sorted(seen) == [(a.name, new.name, c.name), (a.name, new.name, b.name)]


def test_inserting_before_restores_the_insert_point() -> None:
    g, (x, a, b, c, d) = _chain()
    with pytest.raises(ValueError):
        with fxedit.inserting_before(g, c):
            g.call_function(aten.sigmoid.default, (b,))
            raise ValueError
    tail = g.call_function(aten.exp.default, (d,))  # the graph's own insert point again
    names = [n.name for n in g.nodes]
    assert names.index("sigmoid_default") == names.index(c.name) - 1
    assert names[-1] == tail.name  # fx's default: append at the end


def test_fake_cache_tells_targets_apart_and_remembers_what_it_made() -> None:
    with FakeTensorMode():
        t = torch.empty(2, 3)
    g = fx.Graph()
    p = g.placeholder("p")
    p.meta["val"] = t
    fake = FakePropagator()
    relu = fake(aten.relu.default, (p,), {})
    neg = fake(aten.neg.default, (p,), {})
    assert relu is not neg and fake.misses == 2
    assert fake(aten.relu.default, (p,), {}) is relu and fake.hits == 1
    assert fake.described(relu)[:2] == (torch.float32, torch.Size([2, 3]))
    assert fake.described(t)[:2] == (t.dtype, t.shape)  # not made here: read from the value


def test_value_check_compares_symbolic_sizes_without_guards() -> None:
    """The replacement's shape check on SymInt sizes adds no guard to the shape env."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    s0 = env.create_unbacked_symint()
    with FakeTensorMode(shape_env=env):
        a = torch.empty(s0, 8)
        b = torch.empty(s0, 8)
        c = torch.empty(s0, 4)
        d = torch.empty(3, 8)
    before = len(env.guards)
    assert _same_value_type(a, b) is None
    assert _same_value_type(c, a) == "shape [u0, 4] where the graph had [u0, 8]"
    assert _same_value_type(d, a) is not None  # 3 vs u0: not provably equal
    assert len(env.guards) == before


def test_apply_match_output_matches_fx_calls() -> None:
    """One rewrite through apply_match leaves the graph that fx's own calls leave."""

    def rewrite(m: Match, b: object) -> fx.Node:
        return b.call(aten.sigmoid.default, m["x"])  # type: ignore[attr-defined]

    rule = Rule("r", P.op(aten.neg.default, P.op(aten.relu.default, P.tensor("x"))), rewrite)
    with FakeTensorMode():
        val = torch.empty(2, 3)
    states = []
    for fast in (True, False):
        g = fx.Graph()
        x = g.placeholder("x")
        x.meta["val"] = val
        a = g.call_function(aten.relu.default, (x,))
        b = g.call_function(aten.neg.default, (a,))
        out = g.call_function(aten.add.Tensor, (b, x))
        g.output(out)
        for n in (a, b, out):
            n.meta["val"] = val
        b.meta["stack_trace"] = "here"
        if fast:
            m = match_rule(rule, b)
            assert isinstance(m, Match)
            created = apply_match(m, g, FakePropagator())
            assert isinstance(created, list) and len(created) == 1
        else:
            with g.inserting_before(a):
                new = g.create_node("call_function", aten.sigmoid.default, (x,), {})
            new.meta["stack_trace"] = "here"
            b.replace_all_uses_with(new)
            g.erase_node(b)
            g.erase_node(a)
        g.lint()
        new_node = next(n for n in g.nodes if n.target is aten.sigmoid.default)
        states.append((_state(g), new_node.meta.get("stack_trace")))
    assert states[0] == states[1]


def test_fast_edits_do_not_keep_a_graph_alive() -> None:
    """The side-table buckets cached for a graph die with it (they hold its nodes)."""
    import gc
    import weakref

    g, (x, a, b, c, d) = _chain()
    with g.inserting_before(d):
        new = fxedit.create_call(g, aten.relu.default, (c,), {})
    fxedit.erase(g, [new])
    ref = weakref.ref(g)
    del g, x, a, b, c, d, new
    gc.collect()
    assert ref() is None
