"""``Builder.call``'s one-scan path (``FakePropagator.scan``: nodes of the graph and plain
scalars) gives what the general path gives: the same foreign-node verdict, the same cache
key parts as ``_key_parts``, and the same nodes (names, arguments, ``meta["val"]``) and
errors as a Builder whose scan always declines."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode

from graphfuse._errors import RewriteError
from graphfuse._fake import _MISSING, FakePropagator
from graphfuse._fxedit import _plain
from graphfuse._rewriter import Builder, _first_foreign

aten = torch.ops.aten


def _graph() -> tuple[fx.Graph, dict[str, fx.Node]]:
    mode = FakeTensorMode()
    g = fx.Graph()
    x, y, n = g.placeholder("x"), g.placeholder("y"), g.placeholder("n")
    x.meta["val"] = mode.from_tensor(torch.randn(2, 3))
    y.meta["val"] = mode.from_tensor(torch.randn(2, 3, dtype=torch.bfloat16))
    # n: no meta["val"]
    r = g.call_function(aten.relu.default, (x,))
    r.meta["val"] = mode.from_tensor(torch.randn(2, 3))
    g.output(r)
    return g, {"x": x, "y": y, "n": n, "r": r}


def _other() -> fx.Node:
    g = fx.Graph()
    return g.placeholder("z")


# (args by name: a str names a node of the graph, "@z" a node of another graph)
CASES: list[tuple[Any, tuple]] = [
    (aten.add.Tensor, ("x", "x")),
    (aten.add.Tensor, ("x", "y")),
    (aten.mul.Tensor, ("x", 2.0)),
    (aten.mul.Tensor, ("x", 2)),
    (aten.mul.Tensor, ("x", True)),
    (aten.add.Tensor, ("x", "n")),
    (aten.add.Tensor, ("n", "x")),
    (aten.add.Tensor, ("x", "@z")),
    (aten.to.dtype, ("x", torch.float16)),
    (aten.cat.default, (["x", "x"], 1)),
    (aten.cat.default, (["x", "@z"], 0)),
    (aten.ones.default, ([2, 3],)),
    (aten.to.device, ("x", torch.device("cpu"), torch.float32)),
]


def _args(spec: tuple, nodes: dict[str, fx.Node], z: fx.Node) -> tuple:
    def one(a: Any) -> Any:
        if isinstance(a, str) and a.startswith("@"):
            return z
        if isinstance(a, str):
            return nodes[a]
        if isinstance(a, list):
            return [one(b) for b in a]
        return a

    return tuple(one(a) for a in spec)


@pytest.mark.parametrize("target,spec", CASES)
def test_scan_agrees_with_the_general_checks(target: Any, spec: tuple) -> None:
    g, nodes = _graph()
    args = _args(spec, nodes, _other())
    fake = FakePropagator()
    got = fake.scan(args, g)
    plain_here = all(
        (type(a) is fx.Node and a.graph is g)
        or type(a) in (type(None), bool, int, float, str, torch.dtype)
        for a in args
    )
    assert (got is None) == (not plain_here)
    if got is None:
        return
    assert _first_foreign(args, {}, g) is None
    assert _plain(args)
    want = fake._key_parts(args)  # (the same propagator: the same tokens)
    assert (got is _MISSING) == (want is None)
    warm = fake.scan(args, g)  # every value now keyed (unless it has none): the same parts
    assert (warm is _MISSING) == (want is None)
    if want is not None:
        assert got == warm == want
        assert all(type(p) is not fx.Node for p in warm)


def test_a_value_keyed_through_another_node_is_a_hit() -> None:
    g, nodes = _graph()
    fake = FakePropagator()
    first = fake.scan((nodes["x"], 2.0), g)
    same_val = g.placeholder("x2")
    same_val.meta["val"] = nodes["x"].meta["val"]
    assert fake.scan((same_val, 2.0), g) == first
    assert first[1] == (float, 2.0)


class _SlowFake(FakePropagator):
    def scan(self, args: tuple, graph: fx.Graph) -> Any:
        return None  # always the general path


def _build(fake: FakePropagator, target: Any, spec: tuple, kwargs: dict) -> Any:
    g, nodes = _graph()
    b = Builder(g, nodes["r"], fake)
    nodes["r"].meta["stack_trace"] = "here"
    args = _args(spec, nodes, _other())
    try:
        with g.inserting_before(nodes["r"]):
            node = b.call(target, *args, **kwargs)
    except RewriteError as exc:
        return ("error", str(exc), [n.name for n in g.nodes])
    val = node.meta.get("val")
    return (
        node.name,
        repr(node.args),
        repr(node.kwargs),
        node.meta.get("stack_trace"),
        None if val is None else (val.dtype, tuple(val.shape), tuple(val.stride())),
        [n.name for n in g.nodes],
        [u.name for u in nodes["x"].users],
    )


@pytest.mark.parametrize("target,spec", CASES)
@pytest.mark.parametrize("kwargs", [{}, {"out_dtype": None}])
def test_builder_call_fast_equals_slow(target: Any, spec: tuple, kwargs: dict) -> None:
    if kwargs and target is not aten.add.Tensor:
        kwargs = {}
    elif kwargs:
        kwargs = {"alpha": 2}
    fast = _build(FakePropagator(), target, spec, kwargs)
    slow = _build(_SlowFake(), target, spec, kwargs)
    assert fast == slow
    if "@z" in spec:
        assert fast[0] == "error"


def test_fast_path_is_taken_and_hits_the_cache() -> None:
    g, nodes = _graph()
    fake = FakePropagator()
    b = Builder(g, nodes["r"], fake)
    with g.inserting_before(nodes["r"]):
        a1 = b.call(aten.add.Tensor, nodes["x"], nodes["x"])
        a2 = b.call(aten.add.Tensor, nodes["x"], nodes["x"])
    assert fake.scan((nodes["x"], nodes["x"]), g) is not None
    assert (fake.misses, fake.hits) == (1, 1)
    assert a1.meta["val"] is a2.meta["val"]
    assert (a1.name, a2.name) == ("add_tensor", "add_tensor_1")
