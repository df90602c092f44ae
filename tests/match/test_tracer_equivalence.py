"""A search with a tracer (every way tried, every failure noted, for ``explain``) finds
exactly what a search without one finds: at every candidate of real exported programs,
for the bundled rule sets and for random patterns, the same outcome, bindings, tags,
chains, nodes, dims and roots, and the same structural solutions in the same order; the
search without a tracer takes no more steps (it skips ways whose first op cannot
match)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graphfuse
from graphfuse import Rule, RuleSet
from tests.fuzz._programs import SAMPLE_STEPS, RandomProgram, example_inputs

from ._models import candidates
from ._outcomes import both
from ._random_patterns import rooted

STEPS = SAMPLE_STEPS[:2]


@pytest.fixture(scope="module")
def graphs():
    out = []
    for steps in STEPS:
        ep = torch.export.export(RandomProgram(steps), example_inputs(0))
        out += [ep.graph_module.graph, ep.run_decompositions().graph_module.graph]
    return out


def _compare(graphs: list, rules: RuleSet) -> int:
    """Asserts both searches agree at every candidate; returns the number of matches."""
    matches = 0
    for graph in graphs:
        for rule, node in candidates(rules, graph):
            matches += both(rule, node)[0] == "match"
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
@given(pats=st.lists(rooted(), min_size=1, max_size=3))
def test_random_rules_agree(graphs, pats) -> None:
    rules = RuleSet("random", [Rule(f"r{i}", p, lambda m, b: m.root) for i, p in enumerate(pats)])
    _compare(graphs, rules)
