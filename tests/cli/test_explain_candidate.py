"""``graphfuse.match.explain`` (what ``graphfuse explain --node`` shows): trying one rule at
one node with the goals met recorded finds what ``match_rule`` finds, and the walk back onto
the pattern places every value and the stop where the pattern says they are."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given
from torch import fx

import graphfuse
from graphfuse import Rule
from graphfuse import dsl as P
from graphfuse.match import Failure, Match, Tracer, match_rule
from graphfuse.match.explain import Located, PathTracer, explain_candidate
from graphfuse.match.machine import rule_goals, solutions
from graphfuse.match.state import State
from tests.match._models import candidates
from tests.match._random_patterns import FUZZ, rule_sets, sample_graphs

aten = torch.ops.aten


@pytest.fixture(scope="module")
def graphs() -> list[fx.Graph]:
    return sample_graphs()


def _place(patterns: tuple, key: tuple) -> P.Pattern:
    """The sub-pattern at ``key`` (see graphfuse.match.explain)."""
    pat = patterns[key[0]]
    for j in key[1:]:
        if isinstance(pat, P.Call):
            pat = (list(pat.args) + [p for _, p in pat.kwargs])[j]
        elif isinstance(pat, P.Alt):
            pat = pat.branches[j][1]
        elif isinstance(pat, (P.Maybe, P.Typed)):
            pat = pat.inner
        else:
            pat = pat.items[j]
    return pat


def _targets_of(pat: P.Pattern) -> tuple:
    return pat.targets if isinstance(pat, P.Call) else ()


def _check_located(rule: Rule, located: Located, binds: dict[str, Any]) -> None:
    """Every place the walk says was reached holds a value the pattern there accepts."""
    for key, value in located.reached.items():
        pat = _place(rule.patterns, key)
        if isinstance(pat, P.Call):
            t = value.target
            assert t in pat.targets or getattr(t, "overloadpacket", None) in pat.targets, key
        if isinstance(pat, P.Capture) and pat.name in binds:
            same = binds[pat.name] is value if isinstance(value, fx.Node) else True
            assert same, (rule.name, key, pat.name)


def _agree(rule: Rule, node: fx.Node) -> str:
    """explain_candidate agrees with match_rule, and the search keeping a path finds what the
    plain one does; returns the outcome."""
    expected = match_rule(rule, node, Tracer())
    got = explain_candidate(rule, node)
    st1, st2 = State(Tracer()), State(PathTracer())
    plain = [
        (dict(st1.binds), list(st1.nodes))
        for _ in solutions(rule_goals(rule.patterns, node, st1), st1)
    ]
    traced = [
        (dict(st2.binds), list(st2.nodes))
        for _ in solutions(rule_goals(rule.patterns, node, st2), st2)
    ]
    assert plain == traced, (rule.name, node.name)
    assert (0,) in got.located.reached or got.located.stop == (0,), (rule.name, node.name)
    if isinstance(expected, Match):
        assert got.match is not None and got.failure is None
        assert (got.match.binds, got.match.nodes) == (expected.binds, expected.nodes)
        assert got.located.stop is None
        _check_located(rule, got.located, expected.binds)
        return "match"
    assert got.match is None
    if isinstance(expected, Failure):  # an escape or check failure of a full structure
        assert not got.structural and str(got.failure) == str(expected)
        assert got.located.stop is None
        return "refused"
    assert got.structural
    if got.failure is not None:
        assert got.located.stop is not None, (rule.name, node.name, str(got.failure))
        _check_stop(rule, got.located.stop, got.failure)
    return "structure"


def _check_stop(rule: Rule, key: tuple, failure: Failure) -> None:
    """The place where the walk says matching stopped is the kind of pattern that fails
    that way (the very pattern, where the failure names it)."""
    pat, kind, info = _place(rule.patterns, key), failure.kind, failure.info
    where = (rule.name, key, kind, str(failure), repr(pat))
    if kind in ("target", "not_call", "arity"):
        assert pat is info[-1], where
    elif kind == "no_arg":
        assert isinstance(pat, P.Call), where
    elif kind == "literal":
        assert isinstance(pat, (P.Literal, P.ListOf)), where
    elif kind == "kind":
        assert isinstance(pat, P.Capture) and pat.name == info[0], where
    elif kind == "rebind":
        assert getattr(pat, "name", None) == info[0], where
    elif kind in ("no_meta", "dtype", "device", "rank", "size"):
        assert isinstance(pat, P.Typed), where


def test_bundled_rules_on_real_programs(graphs) -> None:
    rules = graphfuse.load_patterns("trtllm")
    seen = [_agree(rule, node) for graph in graphs for rule, node in candidates(rules, graph)]
    assert seen.count("match") >= 4 and seen.count("structure") >= 4


@FUZZ
@given(rules=rule_sets())
def test_random_rules(graphs, rules) -> None:
    for graph in graphs:
        for rule, node in candidates(rules, graph):
            _agree(rule, node)


F8 = torch.float8_e4m3fn
_X = P.tensor("x", dtype=torch.float32)
_RECIP = P.op(aten.reciprocal, P.tensor("s"))
QUANT = P.op(
    aten.to.dtype,
    P.op(aten.clamp, P.op(aten.mul.Tensor, _X, _RECIP, commutative=True), -448, 448),
    F8,
)
QUANT_RULE = Rule("q", QUANT, lambda m, b: m.root)
MUL = (0, 0, 0)  # the mul's place: to -> clamp -> mul


class _Swapped(torch.nn.Module):
    def forward(self, x, s):
        return (
            (torch.reciprocal(s) * x).clamp(-448, 448).to(F8),
            (torch.reciprocal(s) * x.to(torch.bfloat16)).clamp(-448, 448).to(F8),
        )


def test_commutative_call_matched_swapped_places_each_operand() -> None:
    ep = torch.export.export(_Swapped(), (torch.randn(4, 8), torch.tensor(2.0)))
    roots = [n for n in ep.graph.nodes if n.target is aten.to.dtype and n.args[1] == F8]
    nodes = {n.name: n for n in ep.graph.nodes}

    fired = explain_candidate(QUANT_RULE, roots[0])
    assert fired.match is not None
    reached = fired.located.reached
    assert reached[MUL + (0,)] is nodes["x"] and reached[MUL + (1,)] is nodes["reciprocal"]
    assert reached[MUL + (1, 0)] is nodes["s"]

    missed = explain_candidate(QUANT_RULE, roots[1])
    assert missed.structural and missed.failure.kind == "dtype"
    assert missed.located.stop == MUL + (0,)  # the x place, met second in the swapped order
    assert missed.located.stop_value is missed.failure.node
    assert missed.failure.node.meta["val"].dtype == torch.bfloat16
    assert missed.located.reached[MUL + (1,)] is nodes["reciprocal_1"]
