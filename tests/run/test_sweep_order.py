"""The sweep order: every candidate (rule, node) once, sorted by rule priority (highest
first), then the node's position in the graph, then the rule's place in the set; also for
nodes inserted out of creation order, for a priority that several targets and several
rules feed, and for a packet in a pattern (each of its overloads is a root)."""

from __future__ import annotations

import torch
from torch import fx

from graphfuse import Rule, RuleSet
from graphfuse import dsl as P
from graphfuse.rules.rule import anchor_targets
from graphfuse.run import sweep_order
from tests.match._models import fake_input_graph
from tests.match._outcomes import keep_root as _keep

aten = torch.ops.aten


def _graph() -> fx.Graph:
    g, x, val = fake_input_graph(4, 4)
    cur = x
    made = []
    for t in [aten.mul.Tensor, aten.relu.default, aten.add.Tensor, aten.neg.default] * 3:
        cur = g.call_function(t, (cur, cur) if t in (aten.mul.Tensor, aten.add.Tensor) else (cur,))
        cur.meta["val"] = val
        made.append(cur)
    g.output(cur)
    # nodes created last but placed early: creation order is no longer position order
    for n in made[::3]:
        with g.inserting_before(n):
            extra = g.call_function(aten.relu.default, (n.args[0],))
            extra.meta["val"] = val
        with g.inserting_before(extra):
            extra = g.call_function(aten.add.Tensor, (n.args[0], n.args[0]))
            extra.meta["val"] = val
    return g


def _candidates(rules: list[Rule], g: fx.Graph) -> set[tuple[Rule, fx.Node]]:
    """Every (rule, call node) whose target, or its packet, a rule's root may be: found by
    looking at every node (the sweep finds them through the graph's op index)."""
    return {
        (rule, n)
        for n in g.nodes
        if n.op == "call_function"
        for rule in rules
        if any(t is n.target or t is n.target.overloadpacket for t in anchor_targets(rule.pattern))
    }


def test_sweep_order_is_one_sort_of_priority_position_place() -> None:
    g = _graph()
    mul_packet = P.op(aten.mul, P._, P._)
    rules = [
        Rule("relu_a", P.op(aten.relu.default, P._), _keep, priority=2),
        Rule("add_a", P.op(aten.add.Tensor, P._, P._), _keep, priority=2),
        Rule("add_b", P.op(aten.add.Tensor, P._, P._), _keep, priority=2),
        Rule("mul_both", P.alt(a=P.op(aten.mul.Tensor, P._, P._), b=mul_packet), _keep),
        Rule("neg_or_mul", P.alt(a=P.op(aten.neg.default, P._), b=mul_packet), _keep),
        Rule("relu_b", P.op(aten.relu.default, P._), _keep, priority=2),
        Rule("add_low", P.op(aten.add.Tensor, P._, P._), _keep, priority=-3),
    ]
    rs = RuleSet("order", rules)
    pos = {n: i for i, n in enumerate(g.nodes)}
    want = sorted(
        _candidates(rules, g),
        key=lambda rn: (-rn[0].priority, pos[rn[1]], rules.index(rn[0])),
    )
    got = sweep_order(rs, g)
    assert got == want
    assert len(got) == len(set(got)) == 7 * 2 + 7 * 3 + 3 * 2 + 3  # relu, add, mul, neg
    # the first node in position is an add inserted after the graph was built
    first = got[0][1]
    unsorted = g.find_nodes(op="call_function", target=aten.add.Tensor, sort=False)
    assert first.target is aten.add.Tensor and first is not unsorted[0]
    assert [r.name for r, _ in got[:2]] == ["add_a", "add_b"]
