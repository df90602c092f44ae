"""``Builder.call`` adds one call node: fx's name for it, the arguments as given (nodes,
scalars, dtypes, devices, lists), the match root's source metadata, and ``meta["val"]``
from the op's fake impl (none where an input has no value); an argument from another graph
is refused before anything is added. The fake values are cached by the inputs' metadata:
one fake-impl call for same-shaped inputs, a new one for another dtype, shape, stride,
scalar or target."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode

from graphfuse import RewriteError
from graphfuse.rewrite import Builder, FakePropagator

aten = torch.ops.aten


def _graph() -> tuple[fx.Graph, dict[str, fx.Node], FakeTensorMode]:
    mode = FakeTensorMode()
    g = fx.Graph()
    x, y, n = g.placeholder("x"), g.placeholder("y"), g.placeholder("n")
    x.meta["val"] = mode.from_tensor(torch.randn(2, 3))
    y.meta["val"] = mode.from_tensor(torch.randn(2, 3, dtype=torch.bfloat16))
    # n: no meta["val"]
    r = g.call_function(aten.relu.default, (x,))
    r.meta["val"] = mode.from_tensor(torch.randn(2, 3))
    r.meta["stack_trace"] = "here"
    r.meta["nn_module_stack"] = {"m": ("m", "M")}
    g.output(r)
    return g, {"x": x, "y": y, "n": n, "r": r}, mode


# (target, args by name: a str names a node of the graph, "@z" a node of another graph,
# keyword arguments)
CASES: list[tuple[Any, tuple, dict]] = [
    (aten.add.Tensor, ("x", "x"), {}),
    (aten.add.Tensor, ("x", "x"), {"alpha": 2}),
    (aten.add.Tensor, ("x", "y"), {"alpha": 2}),
    (aten.add.Tensor, ("x", "@z"), {"alpha": 2}),
    (aten.add.Tensor, ("x", "y"), {}),
    (aten.mul.Tensor, ("x", 2.0), {}),
    (aten.mul.Tensor, ("x", 2), {}),
    (aten.mul.Tensor, ("x", True), {}),
    (aten.add.Tensor, ("x", "n"), {}),
    (aten.add.Tensor, ("n", "x"), {}),
    (aten.add.Tensor, ("x", "@z"), {}),
    (aten.to.dtype, ("x", torch.float16), {}),
    (aten.cat.default, (["x", "x"], 1), {}),
    (aten.cat.default, (["x", "@z"], 0), {}),
    (aten.ones.default, ([2, 3],), {}),
    (aten.to.device, ("x", torch.device("cpu"), torch.float32), {}),
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


def _has(spec: Any, name: str) -> bool:
    return any(_has(a, name) if isinstance(a, (list, tuple)) else a == name for a in spec)


@pytest.mark.parametrize("target,spec,kwargs", CASES)
def test_call_adds_one_node(target: Any, spec: tuple, kwargs: dict) -> None:
    g, nodes, mode = _graph()
    other = fx.Graph().placeholder("z")
    args = _args(spec, nodes, other)
    b = Builder(g, nodes["r"], FakePropagator())
    before = [n.name for n in g.nodes]
    if _has(spec, "@z"):
        with pytest.raises(
            RewriteError, match="^the replacement's argument z is a node of another"
        ):
            with g.inserting_before(nodes["r"]):
                b.call(target, *args, **kwargs)
        assert [n.name for n in g.nodes] == before and b.created == []
        return
    with g.inserting_before(nodes["r"]):
        node = b.call(target, *args, **kwargs)
    g.lint()
    assert b.created == [node] and node.graph is g
    assert [n.name for n in g.nodes] == before[:3] + [node.name] + before[3:]
    ref, ref_nodes, _ = _graph()  # fx's own call names it alike
    assert node.name == ref.call_function(target, _args(spec, ref_nodes, other), kwargs).name
    assert (node.target, node.args, node.kwargs) == (target, args, kwargs)
    assert node.meta["stack_trace"] == "here" and node.meta["nn_module_stack"] == {"m": ("m", "M")}
    for inp in node.all_input_nodes:
        assert node in inp.users
    if _has(spec, "n") or not node.all_input_nodes:
        # an input without a value, or no input (no fake mode to run in): no value
        assert "val" not in node.meta
        return
    vals = fx.map_arg(args, lambda a: a.meta["val"])
    with mode:
        want = target(*vals, **kwargs)
    got = node.meta["val"]
    assert (got.dtype, got.shape, got.stride(), got.device) == (
        want.dtype,
        want.shape,
        want.stride(),
        want.device,
    )


def test_a_packet_is_called_as_its_default_overload() -> None:
    g, nodes, _ = _graph()
    b = Builder(g, nodes["r"], FakePropagator())
    with g.inserting_before(nodes["r"]):
        node = b.call(aten.neg, nodes["x"])
    assert node.target is aten.neg.default and node.meta["val"].shape == (2, 3)


def test_getitem_picks_an_output() -> None:
    g, nodes, _ = _graph()
    b = Builder(g, nodes["r"], FakePropagator())
    with g.inserting_before(nodes["r"]):
        pair = b.call(aten.max.dim, nodes["x"], -1)
        values = b.getitem(pair, 0)
        indices = b.getitem(pair, 1)
    assert b.created == [pair, values, indices]
    assert values.meta["val"].dtype == torch.float32 and indices.meta["val"].dtype == torch.int64
    assert values.meta["val"].shape == indices.meta["val"].shape == (2,)


def test_same_metadata_is_one_fake_call() -> None:
    g, nodes, _ = _graph()
    fake = FakePropagator()
    b = Builder(g, nodes["r"], fake)
    with g.inserting_before(nodes["r"]):
        a1 = b.call(aten.add.Tensor, nodes["x"], nodes["x"])
        a2 = b.call(aten.add.Tensor, nodes["x"], nodes["x"])
    assert (fake.misses, fake.hits) == (1, 1)
    assert a1.meta["val"] is a2.meta["val"]
    assert (a1.name, a2.name) == ("add_tensor", "add_tensor_1")


def test_fake_cache_keys_on_metadata() -> None:
    """Same metadata -> one fake-impl call; a different dtype, shape, stride, scalar or
    target -> a new one; a node without ``meta["val"]`` -> no value."""
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
    two = fake(aten.mul.Tensor, (nodes[0], 2), {})  # 2 == 2.0, but an int scalar
    assert two is not out and fake.misses == 5
    relu, neg = fake(aten.relu.default, (nodes[0],), {}), fake(aten.neg.default, (nodes[0],), {})
    assert relu is not neg and fake.misses == 7
    assert fake(aten.relu.default, (nodes[1],), {}) is relu and fake.hits == 2
    assert fake(aten.cat.default, ([nodes[0], nodes[1]], 0), {}).shape[0] == 4
    assert fake(aten.cat.default, ([nodes[0], nodes[4]], 0), {}) is None
    assert fake(aten.mul.Tensor, (nodes[4], 2.0), {}) is None
