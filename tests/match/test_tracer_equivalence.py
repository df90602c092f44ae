"""A search with a tracer (every way tried, every failure noted, for ``explain``) finds
exactly what a search without one finds: at every candidate of real exported programs,
for the bundled rule sets and for random patterns, the same outcome, bindings, tags,
chains, nodes, dims and roots, and the same structural solutions in the same order; the
search without a tracer takes no more steps (it skips ways whose first op cannot
match)."""

from __future__ import annotations

import pytest
from hypothesis import given

import graphfuse
from graphfuse import RuleSet

from ._models import candidates
from ._outcomes import both
from ._random_patterns import FUZZ, rule_sets, sample_graphs


@pytest.fixture(scope="module")
def graphs():
    return sample_graphs()


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


@FUZZ
@given(rules=rule_sets())
def test_random_rules_agree(graphs, rules) -> None:
    _compare(graphs, rules)
