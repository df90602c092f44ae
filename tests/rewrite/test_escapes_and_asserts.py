"""What a match may remove: an intermediate with a real user outside the match blocks the
rewrite (a near miss naming that user), a see-through chain that escapes is shortened to
the part below the escape, and metadata asserts never block: they are removed with the
nodes they check and kept on the nodes that stay."""

from __future__ import annotations

import pytest
import torch

import graphfuse
from graphfuse import dsl as P
from tests._models import check_rewrite, export, graph_code, randn, rules

aten = torch.ops.aten
X = P.tensor("x")
SILU = P.op(aten.mul, X, P.op(aten.sigmoid, X), commutative=True)
LAYOUT = [aten.to, aten._to_copy, aten.view, aten.reshape]


def to_silu(m, b):
    return b.call(aten.silu.default, m["x"])


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


def test_an_assert_on_the_root_stays_on_its_replacement():
    """relu(-(x + 1)).to(f16): pre-dispatch asserts the relu's metadata before the cast; the
    relu is replaced, the assert now checks the replacement."""
    ep = export(lambda x: torch.relu(-(x + 1)).to(torch.float16), (torch.randn(3, 4),))
    assert [a.args[0].name for a in _asserts(ep)] == ["relu"]
    rule = graphfuse.Rule(
        "clamp",
        P.op(aten.relu, P.op(aten.neg, X)),
        lambda m, b: b.call(aten.neg.default, b.call(aten.clamp_max.default, m["x"], 0)),
    )
    res = check_rewrite(ep, rules(rule), lambda s: (randn(3, 4, seed=s),), {"clamp": 1})
    (a,) = _asserts(res.program)
    assert a.args[0].name == "neg_default" and a.args[0].args[0].target is aten.clamp_max.default


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
