"""Matching a whole rule at a candidate: the roots, the escape check, the rule's check."""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torch import fx

from . import dsl as P
from ._engine import _m, compiled
from ._failure import Failure
from ._leafcode import _ARGS
from ._match import Match
from ._matcher import (
    VISITS,
    _first_set,
    _probe,
    _State,
    _Tracer,
    exact_literal,
    is_metadata_assert,
    target_matches,
)

if TYPE_CHECKING:
    from ._rules import Rule


def escape_of(nodes: list[fx.Node], roots: tuple[fx.Node, ...], node_set: set) -> Failure | None:
    """The first intermediate (a matched node that is not a root) with a real user outside
    the match, as a :class:`Failure`; None when the match is self-contained."""
    covers = node_set.issuperset  # (every user inside the match: one C call a node)
    for n in nodes:
        if covers(n.users):
            continue
        # by identity: ``in`` on a tuple would call fx.Node's rich comparison per root
        if n is roots[0] or (len(roots) > 1 and any(n is r for r in roots)):
            continue
        for user in n.users:
            if user not in node_set and not is_metadata_assert(user):
                return Failure("escape", (n, user))
    return None


def match_rule(
    rule: Rule,
    node: fx.Node,
    tracer: _Tracer | None = None,
    norm: dict | None = None,
    rejected: list[Match] | None = None,
) -> Match | Failure | None:
    """Match ``rule`` with its first root at ``node``.

    ``norm`` (optional) caches ``normalize(node)`` per node, each entry valid while the
    node's ``args`` and ``kwargs`` are the same objects (fx replaces them on every edit),
    so one dict serves a whole run while rewrites change the graph. ``rejected``
    (optional) collects the structural solutions that the escape check or ``rule.check``
    turned down.

    Returns a :class:`Match` whose escape check and ``rule.check`` passed, else the first
    escape / check failure as a :class:`Failure`, else None (structure did not match; the
    tracer, if given, holds the deepest structural failure).
    """
    if tracer is None and _quick_reject(rule.patterns[0], node):
        return None
    # The escape check and ``rule.check`` run after the search has unwound, not inside
    # its innermost continuation: the search nests a few Python frames per pattern node,
    # and CPython (3.11+) frees a frame-stack chunk as soon as its first frame returns, so
    # a check making dozens of calls across a chunk boundary would allocate and free
    # (mmap / munmap) a chunk on every call. A failing solution is skipped by searching
    # again past it (the order of solutions is fixed), a few times at most; then the
    # remaining solutions are checked in place.
    first_failure: Failure | None = None
    for skip in range(_MAX_RESEARCH + 1):
        m, failure = _search(
            rule, node, tracer, norm, skip, inline=skip == _MAX_RESEARCH, rejected=rejected
        )
        if failure is not None and first_failure is None:
            first_failure = failure
        if m is None:
            return first_failure
        if skip == _MAX_RESEARCH:  # checked in place
            return m
        failure = escape_of(m.nodes, m.roots, m.node_set) or m.run_check()
        if failure is None:
            return m
        if rejected is not None:
            rejected.append(m)
        if first_failure is None:
            first_failure = failure
    return first_failure


_MAX_RESEARCH = 3  # searches again past a failing solution at most this many times


def _search(
    rule: Rule,
    node: fx.Node,
    tracer: _Tracer | None,
    norm: dict | None,
    skip: int,
    inline: bool,
    rejected: list[Match] | None = None,
) -> tuple[Match | None, Failure | None]:
    """The structural solution after the first ``skip`` ones, not yet checked; with
    ``inline``, the first one after them that passes the checks (checked in place; those
    that fail go to ``rejected``), and the first failure met on the way."""
    st = _State(tracer, norm)
    pats = rule.patterns
    if sys.getrecursionlimit() < _MIN_RECURSION:
        sys.setrecursionlimit(_MIN_RECURSION)
    if len(pats) == 1 and not skip and not inline:  # the common case, in one step
        found: list[Match] = []
        roots = (node,)
        c = compiled(pats[0])
        try:
            # the first solution ends the search, state as it is: the match takes it
            run = c.fast if st.fast else c.m
            run(node, st, None, lambda: found.append(Match.taking(rule, roots, st)) or True)
        finally:
            VISITS[0] += st.visits
        return (found[0] if found else None), None
    found = []
    failures: list[Failure] = []
    seen = [0]

    def accept(roots: tuple[fx.Node, ...]) -> bool:
        if seen[0] < skip:
            seen[0] += 1
            return False
        m = Match(rule, roots, st)
        if inline:
            failure = escape_of(m.nodes, roots, st.node_set) or m.run_check()
            if failure is not None:
                if not failures:
                    failures.append(failure)
                if rejected is not None:
                    rejected.append(m)
                return False
        found.append(m)
        return True

    try:
        _m_roots(pats, 0, (node,), st, accept)
    finally:
        VISITS[0] += st.visits
    return (found[0] if found else None), (failures[0] if failures else None)


# Continuations nest a few Python frames per matched pattern node (pure Python calls:
# no C stack in CPython >= 3.11): a search raises the recursion limit to this at least,
# to let patterns of thousands of nodes match.
_MIN_RECURSION = 20_000


_PROBES: dict[tuple[int, int], tuple[Any, tuple | None]] = {}


def _probes(pat: P.Pattern, target: Any) -> tuple | None:
    """For each way ``pat``'s root can be a call of ``target``: the (position, first set)
    of its positional arguments that name their op, and (position, (None, literal)) of
    those that are a literal compared by class and value alone (a dtype, say: see
    ``_matcher.exact_literal``); None when some way cannot be judged by its arguments
    (a ``maybe`` root, a commutative call)."""
    kind = type(pat)
    if kind is P.Typed:
        return _probes(pat.inner, target)  # type: ignore[attr-defined]
    if kind is P.Alt:
        ways: tuple = ()
        for _, branch in pat.branches:  # type: ignore[attr-defined]
            sub = _probes(branch, target)
            if sub is None:
                return None
            ways += sub
        return ways
    if kind is P.Call:
        probe = _probe(pat.targets)  # type: ignore[attr-defined]
        if not target_matches(probe, target):
            return ()  # this way cannot match a call of target
        if pat.commutative:  # type: ignore[attr-defined]
            return None
        args = pat.args  # type: ignore[attr-defined]
        ops = tuple((i, fs) for i, a in enumerate(args) if (fs := _first_set(a)) is not None)
        lits = tuple(
            (i, (None, a.value))
            for i, a in enumerate(args)
            if type(a) is P.Literal and exact_literal(a.value)
        )
        return (ops + lits,)
    return None


def _quick_reject(pat: P.Pattern, node: fx.Node) -> bool:
    """True when every way the rule's root can match ``node`` has a positional argument
    whose root op (or exact literal) certainly differs: rules that cannot match a
    candidate cost a lookup or two, not a match. (A positional argument is what the
    match reads there: dims are made non-negative, but exact literals are no dims.)"""
    t = node.target
    hit = _PROBES.get((id(pat), id(t)))
    if hit is None or hit[0] is not t:
        hit = _PROBES[(id(pat), id(t))] = (t, _merged_probes(_probes(pat, t)))
        _KEEP_ALIVE.append(pat)
    ways = hit[1]
    if ways is None:
        return False
    args = _args(node)
    n = len(args)
    for way in ways:
        for i, exact, packets in way:  # (``_ids_may``, inline)
            if i >= n:
                continue
            a = args[i]
            if exact is None:  # an exact literal (``packets``)
                if a.__class__ is packets.__class__ and a == packets:
                    continue
                break
            if not ((a.__class__ is _NODE or isinstance(a, _NODE)) and a.op == "call_function"):
                break
            at = a.target
            if id(at) not in exact and not (
                packets and id(getattr(at, "overloadpacket", None)) in packets
            ):
                break
        else:
            return False  # this way may match
    return True


_NODE = fx.Node
_args = operator.attrgetter(_ARGS)  # (fx.Node.args is a property reading this slot)


def _merged_probes(ways: tuple | None) -> tuple | None:
    """``ways`` as (position, exact ids, packet ids) probes, the ways that probe a single
    position merged into one per position (an argument that may start any of them): a
    root ``alt`` of many spellings costs one test per argument, not one per branch."""
    if ways is None:
        return None
    single: dict[int, tuple[set, set]] = {}
    out: list[tuple] = []
    for way in ways:
        if len(way) == 1 and way[0][1][0] is not None:
            ((i, (exact, packets)),) = way
            got = single.setdefault(i, (set(), set()))
            got[0].update(exact)
            got[1].update(packets)
        else:
            out.append(tuple((i, exact, packets) for i, (exact, packets) in way))
    merged = [((i, frozenset(e), frozenset(p)),) for i, (e, p) in single.items()]
    return tuple(merged + out)


_KEEP_ALIVE: list[P.Pattern] = []  # ids in _PROBES stay unique while the pattern lives


def _m_roots(pats: tuple, i: int, roots: tuple, st: _State, k: Callable[[tuple], bool]) -> bool:
    if i == 0:
        return _m(pats[0], roots[0], st, None, lambda: _m_roots(pats, 1, roots, st, k))
    if i == len(pats):
        return k(roots)
    # Later roots are found among the users of what the match holds so far.
    seen: set[fx.Node] = set()
    for held in list(st.nodes) + [v for v in st.binds.values() if isinstance(v, fx.Node)]:
        for cand in held.users:
            if cand in seen or cand in st.node_set or cand.op != "call_function":
                continue
            seen.add(cand)
            more = roots + (cand,)
            if _m(pats[i], cand, st, None, lambda more=more: _m_roots(pats, i + 1, more, st, k)):
                return True
    return False
