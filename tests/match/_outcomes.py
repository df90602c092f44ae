"""What one rule's search finds at one node, for comparing a search with a tracer (every
way tried, every failure noted) with one without (ways that cannot start skipped unseen):
the match ``match_rule`` returns, and every structural solution in order with the steps
the search took (``State.steps``)."""

from __future__ import annotations

from torch import fx

from graphfuse import Rule
from graphfuse.match import Failure, Match, Tracer, match_rule
from graphfuse.match.machine import rule_goals, solutions
from graphfuse.match.state import State


def keep_root(m: Match, b: object) -> fx.Node:
    """A rewrite that leaves the graph as it is (the tests look at the search only)."""
    return m.root


def match_fields(m: Match) -> tuple:
    """``(binds, tags, chains, nodes, dims, roots)`` of a match."""
    return (m.binds, m.tags, m.chains, m.nodes, m.dims, m.roots)


def match_outcome(rule: Rule, node: fx.Node, tracer: Tracer | None) -> tuple:
    """``match_rule``'s answer: ``("match", *match_fields)``, ``("failure", kind,
    sentence)`` or ``("none",)``."""
    res = match_rule(rule, node, tracer)
    if isinstance(res, Match):
        return ("match", *match_fields(res))
    if isinstance(res, Failure):
        return ("failure", res.kind, str(res))
    assert res is None, res
    return ("none",)


def structural(rule: Rule, node: fx.Node, tracer: Tracer | None) -> tuple[list[tuple], int]:
    """Every structural solution of ``rule`` rooted at ``node`` (before the escape check and
    ``rule.check``), in the order the search finds them, as ``(binds, tags, chains, nodes,
    dims, roots)``; and the number of steps the whole search took."""
    st = State(tracer)
    found = [
        (dict(st.binds), dict(st.tags), dict(st.chains), list(st.nodes), dict(st.dims))
        + (tuple(st.roots),)
        for _ in solutions(rule_goals(rule.patterns, node, st), st)
    ]
    return found, st.steps


def both(rule: Rule, node: fx.Node) -> tuple:
    """``match_outcome`` of ``rule`` at ``node``, asserting that the search with a tracer
    and the one without find the same match and the same structural solutions in the same
    order, the one without taking no more steps."""
    plain, traced = match_outcome(rule, node, None), match_outcome(rule, node, Tracer())
    assert plain == traced, (rule.name, node.name)
    (sols, steps), (traced_sols, traced_steps) = (
        structural(rule, node, None),
        structural(rule, node, Tracer()),
    )
    assert sols == traced_sols, (rule.name, node.name)
    assert steps <= traced_steps, (rule.name, node.name, steps, traced_steps)
    return plain
