"""What one rule's search found at one node, for comparing the generated-code path with
the traced path: the match's fields and the matcher visits it took."""

from __future__ import annotations

from torch import fx

import graphfuse._matcher as matcher
from graphfuse import Rule
from graphfuse._match import Match
from graphfuse._match_rule import match_rule
from graphfuse._matcher import _Tracer


def keep_root(m: Match, b: object) -> fx.Node:
    """A rewrite that leaves the graph as it is (the tests look at the search only)."""
    return m.root


def match_outcome(rule: Rule, node: fx.Node, tracer: _Tracer | None) -> tuple:
    """``(binds, tags, chains, nodes, dims, visits)`` of a match, ``(None, visits)`` of none."""
    before = matcher.VISITS[0]
    m = match_rule(rule, node, tracer)
    visits = matcher.VISITS[0] - before
    if not isinstance(m, Match):
        return (None, visits)
    return (m.binds, m.tags, m.chains, m.nodes, m.dims, visits)
