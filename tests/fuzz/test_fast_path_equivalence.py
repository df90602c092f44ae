"""The generated fast path (``_codegen``: no tracer) finds exactly what the object path
(with a tracer) finds: at every candidate of real exported programs, for the bundled rule
sets and for random patterns, the same outcome, bindings, tags, chains, nodes and dims;
the fast path visits no more pattern nodes (it skips branches whose first op cannot
match)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graphfuse
import graphfuse._matcher as matcher
from graphfuse import Rule, RuleSet
from graphfuse._failure import Failure
from graphfuse._match import Match
from graphfuse._match_rule import match_rule
from graphfuse._matcher import _Tracer
from tests.fuzz._programs import SAMPLE_STEPS, RandomProgram, example_inputs
from tests.fuzz.test_random_rules import _rooted

STEPS = SAMPLE_STEPS[:2]


@pytest.fixture(scope="module")
def graphs():
    out = []
    for steps in STEPS:
        ep = torch.export.export(RandomProgram(steps), example_inputs(0))
        out += [ep.graph_module.graph, ep.run_decompositions().graph_module.graph]
    return out


def _outcome(rule: Rule, node: torch.fx.Node, tracer: _Tracer | None) -> tuple:
    before = matcher.VISITS[0]
    res = match_rule(rule, node, tracer)
    visits = matcher.VISITS[0] - before
    if isinstance(res, Match):
        return ("match", res.binds, res.tags, res.chains, res.nodes, res.dims, res.roots, visits)
    if isinstance(res, Failure):
        return ("failure", res.kind, visits)
    return ("none",)


def _compare(graphs: list, rules: RuleSet) -> int:
    """Asserts both paths agree at every candidate; returns the number of matches."""
    matches = 0
    for graph in graphs:
        for rule, node in dict.fromkeys(rules.candidates(graph)):
            fast, traced = _outcome(rule, node, None), _outcome(rule, node, _Tracer())
            if fast[0] == "none" or traced[0] == "none":
                # a structural miss: the traced path may stop at another failure first,
                # but neither path may find a match the other does not
                assert fast[0] != "match" and traced[0] != "match", (rule.name, node.name)
                continue
            assert fast[:-1] == traced[:-1], (rule.name, node.name)
            assert fast[-1] <= traced[-1], (rule.name, node.name)
            matches += fast[0] == "match"
    return matches


def test_bundled_rules_agree_on_real_programs(graphs) -> None:
    rules = graphfuse.load_patterns("trtllm")
    assert _compare(graphs, rules) >= 4  # the eligible attention blocks matched


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(pats=st.lists(_rooted(), min_size=1, max_size=3))
def test_random_rules_agree(graphs, pats) -> None:
    rules = RuleSet("random", [Rule(f"r{i}", p, lambda m, b: m.root) for i, p in enumerate(pats)])
    _compare(graphs, rules)
