"""Maybe chains walked by code generated per maybe and path (``_wrappers._walk_source``):
the whole chain tried first, then the shorter chains longest first (looked up again only
then), none where the inner pattern can start at no chain op (``ends_only``); the same
bindings, chains, nodes and outcome as the traced path, never more visits."""

from __future__ import annotations

import pytest
import torch
from torch import fx

from graphfuse import Rule
from graphfuse import dsl as P
from graphfuse._engine import compiled
from graphfuse._matcher import _Tracer
from tests.core._models import fake_input_graph
from tests.core._outcomes import keep_root as _keep
from tests.core._outcomes import match_outcome as _outcome

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


def _both(rule: Rule, node: fx.Node) -> tuple:
    *fast, fast_visits = _outcome(rule, node, None)
    *traced, traced_visits = _outcome(rule, node, _Tracer())
    assert fast == traced
    assert fast_visits <= traced_visits
    return tuple(fast)


def test_a_shorter_chain_matches_where_the_whole_one_fails() -> None:
    # neg(neg(relu(x))): the chain of negs ends at relu, where neg(relu(x)) cannot match;
    # one neg shorter it does
    _, (x, relu, neg1, neg2) = _graph([aten.relu.default, aten.neg.default, aten.neg.default])
    inner = P.op(aten.neg.default, P.op(aten.relu.default, P.tensor("x")), name="n")
    rule = Rule("r", P.maybe([aten.neg.default], inner, name="c"), _keep)
    binds, _, chains, nodes, _ = _both(rule, neg2)
    assert chains == {"c": (neg2,)}
    assert binds["n"] is neg1 and binds["x"] is x
    assert nodes[0] is neg2 and set(nodes) == {neg2, neg1, relu}
    assert not compiled(rule.patterns[0]).ends_only


def test_the_whole_chain_is_tried_first() -> None:
    _, (x, neg1, neg2, relu) = _graph([aten.neg.default, aten.neg.default, aten.relu.default])
    inner = P.maybe([aten.neg.default], P.tensor("x"), name="negs")
    rule = Rule("r", P.op(aten.relu.default, inner), _keep)
    binds, _, chains, _, _ = _both(rule, relu)
    assert chains == {"negs": (neg2, neg1)} and binds["x"] is x


@pytest.mark.parametrize("stop", [False, True])
def test_a_test_that_ends_the_chain_where_only_its_end_may_match(stop: bool) -> None:
    ops = [aten.neg.default, aten.clone.default, aten.clone.default, aten.relu.default]
    _, (x, neg, v1, v2, root) = _graph(ops)
    inner = P.op(aten.neg.default, P.tensor("x"), name="n")
    maybe = P.maybe([aten.clone.default], inner, name="c", where=lambda n: not stop or n is v2)
    rule = Rule("r", P.op(aten.relu.default, maybe), _keep)
    got = _both(rule, root)
    assert compiled(maybe).ends_only  # (neg can start at no clone)
    if stop:  # the chain ends at v1, a clone: no inner there, no match
        assert got == (None,)
    else:
        assert got[2] == {"c": (v2, v1)} and got[0]["n"] is neg


def test_no_chain_at_a_value_that_is_no_chain_op() -> None:
    _, (x, neg) = _graph([aten.neg.default])
    rule = Rule("r", P.maybe([aten.clone.default], P.op(aten.neg.default, P._), name="c"), _keep)
    _, _, chains, nodes, _ = _both(rule, neg)
    assert chains == {"c": ()} and nodes == [neg]
