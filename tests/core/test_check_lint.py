"""``_fxedit.lint`` (the runner's per-sweep lint) passes exactly where ``Graph.lint`` does,
and where a graph is broken it raises fx's own error (it runs ``Graph.lint`` then)."""

from __future__ import annotations

import operator

import pytest
import torch
from torch import fx

from graphfuse import _fxedit
from graphfuse._fxedit import _lint_ok, lint

aten = torch.ops.aten


class _Sub(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("scale", torch.ones(4))


def _module() -> fx.GraphModule:
    """A graph module with every op kind lint looks at: placeholder, get_attr (nested),
    call_module, call_method, call_function (an OpOverload and a Python callable)."""
    root = torch.nn.Module()
    root.sub = _Sub()
    g = fx.Graph()
    x = g.placeholder("x")
    s = g.get_attr("sub.scale")
    y = g.call_module("sub.lin", (x,))
    z = g.call_function(aten.mul.Tensor, (y, s))
    w = g.call_method("relu", (z,))
    v = g.call_function(operator.add, (w, x))
    g.output(v)
    return fx.GraphModule(root, g)


def _node(g: fx.Graph, name: str) -> fx.Node:
    return next(n for n in g.nodes if n.name == name)


def test_a_valid_graph_passes_the_fast_checks() -> None:
    gm = _module()
    assert gm.graph.owning_module is gm
    assert _lint_ok(gm.graph)
    lint(gm.graph)
    bare = fx.Graph()  # no owning module: the target checks do not apply
    x = bare.placeholder("x")
    bare.output(bare.call_function(aten.relu.default, (x,)))
    assert _lint_ok(bare)
    lint(bare)


def _foreign_arg(gm: fx.GraphModule) -> None:
    other = fx.Graph()
    stranger = other.placeholder("stranger")
    _node(gm.graph, "mul_tensor").update_arg(0, stranger)


def _used_before_defined(gm: fx.GraphModule) -> None:
    g = gm.graph
    _node(g, "x").prepend(_node(g, "relu"))  # relu now comes before mul_tensor, its argument


def _unfiled(gm: fx.GraphModule) -> None:
    g = gm.graph
    g._find_nodes_lookup_table.remove(_node(g, "mul_tensor"))


def _duplicate_name(gm: fx.GraphModule) -> None:
    object.__setattr__(_node(gm.graph, "relu"), "name", "mul_tensor")


def _unknown_op(gm: fx.GraphModule) -> None:
    g = gm.graph
    node = _node(g, "relu")
    g._find_nodes_lookup_table.remove(node)
    object.__setattr__(node, "op", "call_bogus")
    g._find_nodes_lookup_table.insert(node)


def _not_callable(gm: fx.GraphModule) -> None:
    _node(gm.graph, "mul_tensor").target = 3


def _missing_attr(gm: fx.GraphModule) -> None:
    _node(gm.graph, "sub_scale").target = "sub.nothing"


def _module_not_a_module(gm: fx.GraphModule) -> None:
    _node(gm.graph, "sub_lin").target = "sub.scale"


def _placeholder_target_not_str(gm: fx.GraphModule) -> None:
    _node(gm.graph, "x").target = 7


def _other_graph_node(gm: fx.GraphModule) -> None:
    g = gm.graph
    node = _node(g, "relu")
    object.__setattr__(node, "graph", fx.Graph())


BREAKS = [
    _foreign_arg,
    _used_before_defined,
    _unfiled,
    _duplicate_name,
    _unknown_op,
    _not_callable,
    _missing_attr,
    _module_not_a_module,
    _placeholder_target_not_str,
    _other_graph_node,
]


@pytest.mark.parametrize("brk", BREAKS, ids=lambda f: f.__name__.strip("_"))
def test_a_broken_graph_raises_fx_own_error(brk) -> None:
    gm = _module()
    try:
        brk(gm)
    except (AttributeError, TypeError) as exc:  # a torch that refuses this edit
        pytest.skip(f"cannot break the graph this way here: {exc}")
    with pytest.raises(Exception) as theirs:
        gm.graph.lint()
    assert not _lint_ok(gm.graph)
    with pytest.raises(type(theirs.value)) as ours:
        lint(gm.graph)
    assert str(ours.value) == str(theirs.value)


def test_without_fx_internals_it_is_fx_lint(monkeypatch) -> None:
    gm = _module()
    _used_before_defined(gm)
    monkeypatch.setattr(_fxedit, "FAST", False)
    monkeypatch.setattr(_fxedit, "_lint_ok", lambda g: pytest.fail("fast checks used"))
    with pytest.raises(RuntimeError, match="used before it has been defined"):
        lint(gm.graph)


def test_the_runner_lints_with_it(monkeypatch) -> None:
    """A sweep that rewrote something lints the graph through ``_fxedit.lint``."""
    import graphfuse
    from graphfuse import Rule, RuleSet, _runner
    from graphfuse import dsl as P

    seen: list[fx.Graph] = []
    monkeypatch.setattr(_runner, "lint_graph", lambda g: seen.append(g) or lint(g))

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.relu(torch.neg(x))

    ep = torch.export.export(M(), (torch.randn(3),))
    rule = Rule(
        "relu_neg",
        P.op(aten.relu, P.op(aten.neg, P.tensor("x"))),
        lambda m, b: b.call(aten.abs.default, m["x"]),
    )
    res = graphfuse.apply(ep, RuleSet("t", [rule]))
    assert res.report.total == 1
    assert seen and all(isinstance(g, fx.Graph) for g in seen)
