"""Matching a whole rule at a candidate node: structure, then escapes, then the check.

``match_rule`` runs the rule's patterns (:mod:`.machine`) rooted at the candidate and takes
the structural solutions in order; the first one whose intermediates are used nowhere
outside the match and whose ``check`` passes is the match.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import fx

from ..fxnodes import is_metadata_assert
from .failure import Failure
from .machine import rejects_at_once, rule_goals, solutions
from .result import Match
from .state import State, Tracer

if TYPE_CHECKING:
    from ..rules.rule import Rule


def escape_of(m: Match) -> Failure | None:
    """The first intermediate of ``m`` (a matched node that is not a root) with a real user
    outside the match, as a :class:`Failure`; None when the match is self-contained."""
    node_set, roots = m.node_set, m.roots
    for n in m.nodes:
        if node_set.issuperset(n.users) or any(n is r for r in roots):
            continue
        for user in n.users:
            if user not in node_set and not is_metadata_assert(user):
                return Failure("escape", (n, user))
    return None


def match_rule(
    rule: Rule, node: fx.Node, tracer: Tracer | None = None, norm: dict | None = None
) -> Match | Failure | None:
    """Match ``rule`` with its first root at ``node``.

    Args:
        rule: the rule.
        node: the candidate for its (first) root.
        tracer: records the deepest structural failure (for ``explain``).
        norm: a cache of normalized arguments, valid across edits (see ``machine``).

    Returns:
        the first structural solution whose escape check and ``rule.check`` pass, as a
        :class:`Match`; else the first escape or check failure; else None (the structure
        did not match; the tracer, if given, holds the deepest failure).
    """
    if tracer is None and rejects_at_once(rule.patterns[0], node):
        return None
    st = State(tracer, norm)
    first_failure: Failure | None = None
    for _ in solutions(rule_goals(rule.patterns, node, st), st):
        m = Match.of_state(rule, st)
        failure = escape_of(m) or m.run_check()
        if failure is None:
            return m
        if first_failure is None:
            first_failure = failure
    return first_failure
