"""Maybe chains: the whole chain is tried first, then the shorter chains, longest first;
none where the inner pattern can start at no chain op and the chain's test stops it
early; the same bindings, chains, nodes and outcome with a tracer and without."""

from __future__ import annotations

import pytest
import torch
from torch import fx

from graphfuse import Rule
from graphfuse import dsl as P

from ._models import fake_input_graph
from ._outcomes import both, structural
from ._outcomes import keep_root as _keep

aten = torch.ops.aten


def _graph(ops: list) -> tuple[fx.Graph, list[fx.Node]]:
    """x -> ops[0] -> ops[1] -> ... (each op of one tensor argument)."""
    g, x, val = fake_input_graph(2, 3)
    made = [x]
    for op in ops:
        made.append(g.call_function(op, (made[-1],)))
        made[-1].meta["val"] = val
    g.output(made[-1])
    return g, made


def test_a_shorter_chain_matches_where_the_whole_one_fails() -> None:
    # neg(neg(relu(x))): the chain of negs ends at relu, where neg(relu(x)) cannot match;
    # one neg shorter it does
    _, (x, relu, neg1, neg2) = _graph([aten.relu.default, aten.neg.default, aten.neg.default])
    inner = P.op(aten.neg.default, P.op(aten.relu.default, P.tensor("x")), name="n")
    rule = Rule("r", P.maybe([aten.neg.default], inner, name="c"), _keep)
    kind, binds, _, chains, nodes, _, _ = both(rule, neg2)
    assert kind == "match"
    assert chains == {"c": (neg2,)}
    assert binds["n"] is neg1 and binds["x"] is x
    assert nodes[0] is neg2 and set(nodes) == {neg2, neg1, relu}


def test_the_whole_chain_is_tried_first() -> None:
    _, (x, neg1, neg2, relu) = _graph([aten.neg.default, aten.neg.default, aten.relu.default])
    inner = P.maybe([aten.neg.default], P.tensor("x"), name="negs")
    rule = Rule("r", P.op(aten.relu.default, inner), _keep)
    kind, binds, _, chains, _, _, _ = both(rule, relu)
    assert kind == "match"
    assert chains == {"negs": (neg2, neg1)} and binds["x"] is x
    # every chain length is a solution, longest first
    sols, _ = structural(rule, relu, None)
    assert [s[2]["negs"] for s in sols] == [(neg2, neg1), (neg2,), ()]
    assert [s[0]["x"] for s in sols] == [x, neg1, neg2]


@pytest.mark.parametrize("stop", [False, True])
def test_a_test_that_ends_the_chain_where_only_its_end_may_match(stop: bool) -> None:
    ops = [aten.neg.default, aten.clone.default, aten.clone.default, aten.relu.default]
    _, (x, neg, v1, v2, root) = _graph(ops)
    inner = P.op(aten.neg.default, P.tensor("x"), name="n")
    maybe = P.maybe([aten.clone.default], inner, name="c", where=lambda n: not stop or n is v2)
    rule = Rule("r", P.op(aten.relu.default, maybe), _keep)
    got = both(rule, root)
    if stop:  # the chain ends at v1, a clone: no inner there, no match
        assert got == ("none",)
    else:
        assert got[0] == "match" and got[3] == {"c": (v2, v1)} and got[1]["n"] is neg


def test_no_chain_at_a_value_that_is_no_chain_op() -> None:
    _, (x, neg) = _graph([aten.neg.default])
    rule = Rule("r", P.maybe([aten.clone.default], P.op(aten.neg.default, P._), name="c"), _keep)
    kind, _, _, chains, nodes, _, _ = both(rule, neg)
    assert kind == "match"
    assert chains == {"c": ()} and nodes == [neg]
