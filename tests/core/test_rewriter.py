"""Rewrites on exported programs: numerics, meta, asserts, multi-output, and failure paths."""

from __future__ import annotations

import operator

import pytest
import torch

import graphfuse
from graphfuse import dsl as P
from graphfuse._program import copy_graph_module
from graphfuse._runner import run_rules

from ._models import (
    Silu,
    aten,
    check_rewrite,
    dims,
    export,
    gftest,
    graph_code,
    randn,
    rules,
    targets,
)

X = P.tensor("x")
SILU = P.op(aten.mul, X, P.op(aten.sigmoid, X), commutative=True)


def to_silu(m, b):
    """x * sigmoid(x) -> aten.silu"""
    return b.call(aten.silu.default, m["x"])


def to_custom_silu(m, b):
    return b.call(gftest.silu.default, m["x"])


@pytest.fixture(scope="module")
def silu_eps():
    x = (torch.randn(3, 8),)
    return {
        "pre": export(Silu(), x),
        "decomposed": export(Silu(swap=True), x, decompose=True),
        "dynamic": torch.export.export(Silu(), x, dynamic_shapes={"x": {0: dims("B")[0]}}),
    }


@pytest.mark.parametrize("kind", ["pre", "decomposed", "dynamic"])
@pytest.mark.parametrize(
    ("rewrite", "target"), [(to_silu, aten.silu.default), (to_custom_silu, gftest.silu.default)]
)
def test_silu_rewrite(silu_eps, kind, rewrite, target):
    ep = silu_eps[kind]
    rs = rules(graphfuse.Rule("silu", SILU, rewrite))
    rows = 5 if kind == "dynamic" else 3  # a new batch size for the dynamic export
    res = check_rewrite(ep, rs, lambda s: (randn(rows, 8, seed=s),), {"silu": 1})
    assert targets(res.program) == [target]


def test_new_nodes_carry_meta(silu_eps):
    ep = silu_eps["pre"]
    (old,) = [n for n in ep.graph.nodes if n.target is aten.mul.Tensor]
    res = graphfuse.apply(ep, rules(graphfuse.Rule("silu", SILU, to_silu)))
    (new,) = [n for n in res.program.graph.nodes if n.target is aten.silu.default]
    assert old.meta["stack_trace"] and old.meta["nn_module_stack"]
    for key in ("stack_trace", "nn_module_stack", "source_fn_stack", "torch_fn"):
        assert new.meta.get(key) == old.meta.get(key), key
    assert isinstance(new.meta["val"], torch.Tensor)
    assert new.meta["val"].shape == old.meta["val"].shape


# ------------------------------------------------------------ see-through chains and asserts

LAYOUT = [aten.to, aten._to_copy, aten.view, aten.reshape]


def relu_first(m, b):
    """relu(chain(x)) -> chain(relu(x)) (exact for casts and views)."""
    cur = b.call(aten.relu.default, m["x"])
    for node in reversed(m.chain("pre")):  # innermost first
        cur = b.call(node.target, cur, *node.args[1:], **node.kwargs)
    return cur


RELU_FIRST = graphfuse.Rule(
    "relu_first",
    P.op(aten.relu, P.maybe(LAYOUT, X, name="pre")),
    relu_first,
    check=lambda m: None if m.chain("pre") else "nothing to see through",
)


def _cast_chain(x):
    return torch.relu(x.to(torch.float16).to(torch.float32).view(4, 6))


def _asserts(program):
    return [n for n in program.graph.nodes if n.target is aten._assert_tensor_metadata.default]


@pytest.mark.parametrize("decompose", [False, True])
def test_asserts_do_not_block_and_go_with_their_nodes(decompose):
    ep = export(_cast_chain, (torch.randn(2, 3, 4),), decompose=decompose)
    checked = {a.args[0].name for a in _asserts(ep)}
    assert len(checked) == 2  # x (an input, stays) and the f16 cast (an intermediate)
    res = check_rewrite(
        ep, rules(RELU_FIRST), lambda s: (randn(2, 3, 4, seed=s),), {"relu_first": 1}
    )
    assert [a.args[0].name for a in _asserts(res.program)] == ["x"]
    out = res.program.graph.output_node().args[0][0]
    assert out.target is aten.view.default and out.args[0].target in (
        aten.to.dtype,
        aten._to_copy.default,
    )
    # the second pass finds nothing left to see through
    again = graphfuse.apply(res.program, rules(RELU_FIRST))
    assert again.report.counts == {"relu_first": 0}


def test_an_extra_real_user_blocks_the_rewrite():
    def fn(x):
        y = torch.sigmoid(x)
        return x * y, y

    ep = export(fn, (torch.randn(3, 4),))
    rs = rules(graphfuse.Rule("silu", SILU, to_silu))
    res = check_rewrite(ep, rs, lambda s: (randn(3, 4, seed=s),), {"silu": 0})
    assert graph_code(res.program) == graph_code(ep)
    assert [str(nm) for nm in res.report.near_misses] == [
        "rule silu at sigmoid: sigmoid (aten.sigmoid) is also used by the graph's output "
        "outside the match"
    ]


def test_an_escaping_chain_link_shortens_the_chain():
    """The longest see-through chain escapes (y is an output); the matcher backtracks to
    the chain below y, so the rewrite still happens and y stays."""

    def fn(x):
        y = x.to(torch.float16)
        return torch.relu(y.to(torch.float32)), y

    ep = export(fn, (torch.randn(3, 4),))
    res = check_rewrite(ep, rules(RELU_FIRST), lambda s: (randn(3, 4, seed=s),), {"relu_first": 1})
    relu = [n for n in res.program.graph.nodes if n.target is aten.relu.default]
    assert [r.args[0].name for r in relu] == ["to"]


# ------------------------------------------------------------ multi-output rewrites


def _pair(pattern_op, *extra):
    src = P.op(pattern_op, X, *extra)
    return (P.getitem(src, 0), P.getitem(src, 1))


def test_max_dim_to_a_custom_multi_output_op():
    ep = export(lambda x: x.max(dim=-1), (torch.randn(3, 5),))

    def rewrite(m, b):
        node = b.call(gftest.max_last.default, m["x"])
        return b.getitem(node, 0), b.getitem(node, 1)

    rs = rules(graphfuse.Rule("max_last", _pair(aten.max.dim, -1), rewrite))
    res = check_rewrite(ep, rs, lambda s: (randn(3, 5, seed=s),), {"max_last": 1})
    assert gftest.max_last.default in targets(res.program)
    assert aten.max.dim not in targets(res.program)


@pytest.mark.parametrize("decompose", [False, True])
def test_var_mean_to_two_nodes(decompose):
    ep = export(lambda x: torch.var_mean(x, dim=-1), (torch.randn(3, 5),), decompose=decompose)

    def rewrite(m, b):
        return (
            b.call(aten.var.correction, m["x"], [1], correction=1),
            b.call(aten.mean.dim, m["x"], [1]),
        )

    rs = rules(graphfuse.Rule("split_var_mean", _pair(aten.var_mean, [-1]), rewrite))
    res = check_rewrite(ep, rs, lambda s: (randn(3, 5, seed=s),), {"split_var_mean": 1})
    assert operator.getitem not in targets(res.program)


def test_custom_multi_output_op_rewritten_to_aten():
    ep = export(lambda x: gftest.minmax(x), (torch.randn(3, 5),))

    def rewrite(m, b):
        return b.call(aten.amin.default, m["x"], [-1]), b.call(aten.amax.default, m["x"], [-1])

    rs = rules(graphfuse.Rule("split_minmax", _pair(gftest.minmax), rewrite))
    res = check_rewrite(ep, rs, lambda s: (randn(3, 5, seed=s),), {"split_minmax": 1})
    assert targets(res.program) == [aten.amin.default, aten.amax.default]


# ------------------------------------------------------------ failure paths


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
    ],
)
def test_broken_rewrites_raise_and_leave_the_graph_alone(silu_eps, rewrite, message):
    ep = silu_eps["pre"]
    rs = rules(graphfuse.Rule("bad", SILU, rewrite))
    gm = copy_graph_module(ep.graph_module)
    before = graph_code(gm)
    with pytest.raises(graphfuse.RewriteError) as err:
        run_rules(gm.graph, rs)
    assert str(err.value) == message
    assert graph_code(gm) == before
    gm.graph.lint()
    with pytest.raises(graphfuse.RewriteError):
        graphfuse.apply(ep, rs)
    assert graph_code(ep) == before
