"""Round-3 matcher speed-ups, checked structurally: the sweep order dealt by priority (no
sort of every candidate); a one-way call inlined into its parent's generated function
(within a budget, so shared sub-patterns cannot blow the code up); a negative dim literal
compared without normalizing the node, the rank looked up only for dims that need it; the
quick reject of a root ``alt`` with one test per argument."""

from __future__ import annotations

import re

import pytest
import torch
from torch import fx
from torch.fx.immutable_collections import immutable_list

import graphfuse._args as args_mod
import graphfuse._codegen as codegen
import graphfuse._engine as engine
import graphfuse._matcher as matcher
from graphfuse import Rule, RuleSet
from graphfuse import dsl as P
from graphfuse._args import _NO_DEFAULT, canonical_dim
from graphfuse._match import Match
from graphfuse._match_rule import _quick_reject, match_rule
from graphfuse._matcher import _Tracer
from tests.core._models import fake_input_graph
from tests.core._outcomes import keep_root as _keep
from tests.core._outcomes import match_outcome as _outcome

aten = torch.ops.aten


def test_sweep_order_is_priority_then_position_then_place() -> None:
    g, x, val = fake_input_graph(4, 4)
    nodes = []
    cur = x
    for t in [aten.mul.Tensor, aten.relu.default, aten.mul.Tensor, aten.neg.default] * 3:
        cur = g.call_function(t, (cur, cur) if t is aten.mul.Tensor else (cur,))
        cur.meta["val"] = val
        nodes.append(cur)
    g.output(cur)
    mul, mul_packet = P.op(aten.mul.Tensor, P._, P._), P.op(aten.mul, P._, P._)
    rules = [
        Rule("mul_low", mul, _keep, priority=0),
        Rule("relu_high", P.op(aten.relu.default, P._), _keep, priority=5),
        # indexed by the overload and by its packet: each node once
        Rule("mul_both", P.alt(a=mul, b=mul_packet), _keep),
        Rule("any_high", P.alt(a=P.op(aten.neg.default, P._), b=mul_packet), _keep, priority=5),
        Rule("relu_low", P.op(aten.relu.default, P._), _keep, priority=-1),
    ]
    rs = RuleSet("order", rules)
    pos = {n: i for i, n in enumerate(g.nodes)}
    want = sorted(
        {(r, n) for r, n in rs.candidates(g)},
        key=lambda rn: (-rn[0].priority, pos[rn[1]], rules.index(rn[0])),
    )
    got = rs.sweep_order(g)
    assert got == want
    assert len(got) == len(set(got))
    assert [r.name for r, _ in got[:4]] == ["any_high", "relu_high", "any_high", "any_high"]
    assert [r.name for r, _ in got[12:14]] == ["mul_low", "mul_both"]  # (place in the set)


def _chain_pattern() -> P.Pattern:
    """A one-way pattern of exact overloads (as a traced block is): every call inlined."""
    x = P.tensor("x")
    inner = P.op(aten.permute.default, P.op(aten.exp.default, x), [0, 2, 1])
    return P.op(aten.neg.default, P.op(aten._softmax.default, inner, -1, False))


def _chain_graph() -> tuple[fx.Graph, fx.Node]:
    g, x, val = fake_input_graph(2, 3, 3)
    e = g.call_function(aten.exp.default, (x,))
    p = g.call_function(aten.permute.default, (e, [0, 2, 1]))
    s = g.call_function(aten._softmax.default, (p, 2, False))  # dim spelled non-negative
    out = g.call_function(aten.neg.default, (s,))
    for n in (e, p, s, out):
        n.meta["val"] = val
    g.output(out)
    return g, out


def test_one_way_pattern_is_one_straight_function() -> None:
    pat = _chain_pattern()
    g, out = _chain_graph()
    rule = Rule("chain", pat, _keep)
    fast, traced = _outcome(rule, out, None), _outcome(rule, out, _Tracer())
    assert fast[0] is not None
    assert fast[:-1] == traced[:-1] and fast[-1] <= traced[-1]
    assert [n.target for n in fast[3]] == [
        aten.neg.default, aten._softmax.default, aten.permute.default, aten.exp.default,
    ]  # fmt: skip
    source = engine.compiled(pat).plans[id(aten.neg.default)].code().source
    # no continuation and no entry lookup: the three calls below the root are inline
    assert "def k" not in source and "ENTRY(" not in source
    assert source.count(".target is TG") == 3  # the three inlined calls' target tests


def test_inlining_stops_at_its_budget() -> None:
    """A pattern whose shared sub-pattern doubles at every level (2**8 paths) inlines at
    most ``_INLINE_BUDGET`` calls into one function and still matches."""
    g, x, val = fake_input_graph(4)
    pat: P.Pattern = P.op(aten.neg.default, P.tensor("x"), name="n0")
    node = g.call_function(aten.neg.default, (x,))
    node.meta["val"] = val
    for i in range(1, 9):
        pat = P.op(aten.add.Tensor, pat, pat, name=f"n{i}")
        node = g.call_function(aten.add.Tensor, (node, node))
        node.meta["val"] = val
    g.output(node)
    source = engine.compiled(pat).plan_for(aten.add.Tensor).code().source
    inlined = re.findall(r"^ *v\d+ = a$", source, flags=re.M)  # (``v<n> = a``: one per inline)
    assert len(inlined) == codegen._INLINE_BUDGET
    assert len(source) < 400_000
    rule = Rule("doubling", pat, _keep)
    fast, traced = _outcome(rule, node, None), _outcome(rule, node, _Tracer())
    assert fast[0] is not None and fast[:-1] == traced[:-1]
    assert fast[-1] <= 18  # each shared node walked once (9 calls, their second uses)


def test_a_deep_chain_of_shared_calls_compiles_and_matches() -> None:
    """Each shared call inlined nests a block; past the budget the rest is called."""
    g, x, val = fake_input_graph(4)
    pat: P.Pattern = P.tensor("x")
    node = x
    for i in range(120):
        pat = P.op(aten.neg.default, pat, name=f"n{i}")
        node = g.call_function(aten.neg.default, (node,))
        node.meta["val"] = val
    g.output(node)
    rule = Rule("deep", pat, _keep)
    fast, traced = _outcome(rule, node, None), _outcome(rule, node, _Tracer())
    assert fast[0] is not None and fast[:-1] == traced[:-1] and fast[-1] <= traced[-1]
    assert len(fast[3]) == 120


@pytest.mark.parametrize("spelled", [-1, 2])
def test_negative_dim_literal_compares_without_normalizing(monkeypatch, spelled) -> None:
    g, x, val = fake_input_graph(2, 3, 3)
    sm = g.call_function(aten._softmax.default, (x, spelled, False))
    sm.meta["val"] = val
    g.output(sm)

    def no_normalize(node: fx.Node) -> int:
        raise AssertionError("literal_equal normalized the node")

    monkeypatch.setattr(matcher, "first_tensor_rank", no_normalize)
    for lit, ok in ((-1, True), (2, True), (-2, False), ([-1], False)):
        rule = Rule(f"sm{lit}", P.op(aten._softmax.default, P.tensor("x"), lit, False), _keep)
        assert isinstance(match_rule(rule, sm), Match) is ok, lit
    # another kind of value (a float dim) still goes through literal_equal, which decides
    monkeypatch.undo()
    sm.args = (x, float(spelled), False)  # (-1.0 equals -1; 2.0 equals -1 made non-negative)
    rule = Rule("sm_float", P.op(aten._softmax.default, P.tensor("x"), -1, False), _keep)
    assert isinstance(match_rule(rule, sm), Match)


def test_rank_is_looked_up_only_for_dims_that_need_it(monkeypatch) -> None:
    g, out = _chain_graph()
    perm = out.args[0].args[0]
    plan = engine.compiled(P.op(aten.permute.default, P._, P.any("d"))).plan_for(perm.target)
    calls = []
    rank = engine._rank
    monkeypatch.setattr(engine, "_rank", lambda v: calls.append(v) or rank(v))
    got, r = plan.read_ranked(perm)
    assert got[1] == [0, 2, 1] and r is _NO_DEFAULT and not calls
    # the pattern's -1 still matches the softmax spelled with 2 (rank looked up on demand)
    rule = Rule("chain", _chain_pattern(), _keep)
    assert isinstance(match_rule(rule, out), Match)
    assert len(calls) == 1


def test_canonical_dims_keep_or_share_immutable_values() -> None:
    dims = immutable_list([0, 2, 1])
    assert canonical_dim(dims, 3) is dims  # nothing to change
    neg = immutable_list([-1, 0])
    a, b = canonical_dim(neg, 3), canonical_dim(immutable_list([-1, 0]), 3)
    assert a == [2, 0] and type(a) is immutable_list and a is b
    plain = [-1]
    assert canonical_dim(plain, 3) == [2] and canonical_dim(plain, 3) is not canonical_dim(plain, 3)
    assert canonical_dim([True, -1], 2) == [True, 1]  # (not plain ints: the general path)
    assert args_mod.canonical_dim((-2, -1), 4) == (2, 3)


def test_quick_reject_of_a_root_alt_tests_each_argument_once() -> None:
    g, x, val = fake_input_graph(4)
    e = g.call_function(aten.exp.default, (x,))
    s = g.call_function(aten.sin.default, (x,))
    ne = g.call_function(aten.neg.default, (e,))
    ns = g.call_function(aten.neg.default, (s,))
    for n in (e, s, ne, ns):
        n.meta["val"] = val
    pat = P.alt(
        exp=P.op(aten.neg.default, P.op(aten.exp.default, P._)),
        cos=P.op(aten.neg.default, P.op(aten.cos.default, P._)),
        both=P.op(aten.neg.default, P.op(aten.relu.default, P._)),
    )
    assert not _quick_reject(pat, ne)
    assert _quick_reject(pat, ns)
    rule = Rule("neg_of", pat, _keep)
    assert isinstance(match_rule(rule, ne), Match) and match_rule(rule, ns) is None


def test_rebound_copies_every_slot_but_the_bindings() -> None:
    """``Match.rebound`` assigns the slots one by one (it runs once per planned match): a slot
    added to ``Match`` later must be added there too, or this fails."""
    m = Match.__new__(Match)
    for i, slot in enumerate(Match.__slots__):
        setattr(m, slot, object() if slot != "binds" else {"x": i})
    new_binds = {"y": 1}
    r = m.rebound(new_binds)
    assert r.binds is new_binds
    for slot in Match.__slots__:
        if slot != "binds":
            assert getattr(r, slot) is getattr(m, slot), slot
