"""Explaining one candidate: the matcher run with a record of the goals met, mapped back
onto the pattern.

:func:`explain_candidate` runs the same matchers as :func:`~.search.match_rule`, with a
:class:`PathTracer`: a :class:`~.state.Tracer` that also keeps the goals met on the way to
the deepest failure (the *path*). :func:`locate` then walks the rule's patterns in goal
order (arguments left to right, the branch an alternative took, a ``maybe`` chain's inner
pattern) and says, for each place in the pattern, which value it matched and where
matching stopped. A place is a *key*: the pattern's index in the rule, then the child
index at each level (a call's arguments then keywords, an alternative's branches, the
inner pattern of ``maybe`` / ``typed``, a list's items).

:func:`~.machine.solutions` keeps the path when its tracer has one; ``apply`` runs with
no tracer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from torch import fx

from .. import dsl as P
from ..errors import GraphfuseError
from .failure import Failure
from .machine import LaterRoots, compiled, rule_goals, solutions
from .result import Match
from .search import escape_of
from .simple import is_call
from .state import State, Tracer

if TYPE_CHECKING:
    from ..rules.rule import Rule

Key = tuple[int, ...]


class PathTracer(Tracer):
    """A tracer that also keeps the goals met so far (``path``, as (matcher, value)) and,
    at the deepest failure, the goal that failed (``stop``) and the path before it."""

    __slots__ = ("goal", "path", "stop", "stop_path")

    def __init__(self) -> None:
        super().__init__()
        self.goal: tuple[Any, Any] | None = None
        self.path: list[tuple[Any, Any]] = []
        self.stop: tuple[Any, Any] | None = None
        self.stop_path: list[tuple[Any, Any]] = []

    def note(self, depth: int, failure: Failure) -> None:
        if depth > self.depth:
            self.depth, self.failure = depth, failure
            self.stop, self.stop_path = self.goal, list(self.path)


@dataclass
class Located:
    """Where a rule's patterns met what: ``reached`` maps a key to the value matched
    there, ``stop`` is the key where matching stopped (None after a full match),
    ``stop_value`` what it met there, ``chains`` the nodes each ``maybe`` passed
    through, ``same`` a named call met again (key -> the key of its first occurrence)."""

    reached: dict[Key, Any] = field(default_factory=dict)
    stop: Key | None = None
    stop_value: Any = None
    chains: dict[Key, tuple[fx.Node, ...]] = field(default_factory=dict)
    same: dict[Key, Key] = field(default_factory=dict)


def _chain_targets(pat: P.Maybe, node: Any) -> bool:
    if not is_call(node) or not node.args:
        return False
    t = node.target
    if t not in pat.targets and getattr(t, "overloadpacket", None) not in pat.targets:
        return False
    return pat.where is None or bool(pat.where(node))


def _inlined(pat: P.Pattern, value: Any) -> tuple[int, P.Pattern] | None:
    """The child a matcher may step into at once, in the same goal (an alternative with
    one branch, a ``maybe`` with no chain at ``value``)."""
    if isinstance(pat, P.Alt) and len(pat.branches) == 1:
        return 0, pat.branches[0][1]
    if isinstance(pat, P.Maybe) and not _chain_targets(pat, value):
        return 0, pat.inner
    return None


class _Walk:
    """Walks patterns in goal order, consuming the path (see :func:`locate`)."""

    def __init__(self, path: list[tuple[Any, Any]], stop: tuple[Any, Any] | None) -> None:
        self.path, self.i, self.stop = path, 0, stop
        self.out = Located()
        self.named: dict[str, tuple[Any, Key]] = {}

    def _next(self, matcher: Any) -> bool:
        return self.i < len(self.path) and self.path[self.i][0] is matcher

    def _stops(self, matcher: Any) -> bool:
        return (
            self.i == len(self.path)
            and self.stop is not None
            and self.out.stop is None
            and self.stop[0] is matcher
        )

    def _comes(self, pat: P.Pattern) -> bool:
        """Whether ``pat``'s goal is the next one (met or the one that failed)."""
        m = compiled(pat)
        return self._next(m) or self._stops(m)

    def _mark_stop(self, pat: P.Pattern, key: Key, value: Any) -> None:
        while (inner := _inlined(pat, value)) is not None:
            self.out.reached[key] = value
            key, pat = key + (inner[0],), inner[1]
        self.out.stop, self.out.stop_value = key, value

    def walk(self, pat: P.Pattern, key: Key, inline: tuple[Any] | None = None) -> None:
        m = compiled(pat)
        if inline is not None:
            value = inline[0]
        elif self._next(m):
            value = self.path[self.i][1]
            self.i += 1
        else:
            if self._stops(m):
                self._mark_stop(pat, key, self.stop[1])  # type: ignore[index]
            return
        self.out.reached[key] = value
        if isinstance(pat, P.Call):
            self._call(pat, key, value)
        elif isinstance(pat, P.Alt):
            for j, (_, branch) in enumerate(pat.branches):
                if self._comes(branch):
                    self.walk(branch, key + (j,))
                    return
            self._inline(pat, key, value)
        elif isinstance(pat, P.Maybe):
            if self._comes(pat.inner):
                at = self.path[self.i][1] if self._next(compiled(pat.inner)) else self.stop[1]  # type: ignore[index]
                chain, node = [], value
                while node is not at and _chain_targets(pat, node):
                    chain.append(node)
                    node = node.args[0]
                self.out.chains[key] = tuple(chain)
                self.walk(pat.inner, key + (0,))
            else:
                self._inline(pat, key, value)
        elif isinstance(pat, P.Typed):
            self.walk(pat.inner, key + (0,))
            if self._next(m.test):
                self.i += 1
            elif self._stops(m.test):
                self.out.stop, self.out.stop_value = key, value
        elif isinstance(pat, P.ListOf):
            for j, item in enumerate(pat.items):
                self.walk(item, key + (j,))

    def _inline(self, pat: P.Pattern, key: Key, value: Any) -> None:
        inner = _inlined(pat, value)
        if inner is not None:
            if isinstance(pat, P.Maybe):
                self.out.chains[key] = ()
            self.walk(inner[1], key + (inner[0],), (value,))

    def _call(self, pat: P.Call, key: Key, value: Any) -> None:
        children = list(pat.args) + [p for _, p in pat.kwargs]
        if pat.name is not None:
            seen = self.named.get(pat.name)
            if seen is not None and seen[0] is value and children and not self._comes(children[0]):
                self.out.same[key] = seen[1]  # met again: matched at once
                return
            self.named.setdefault(pat.name, (value, key))
        order = list(range(len(children)))
        if pat.commutative and not self._comes(children[0]) and self._comes(children[1]):
            order[0], order[1] = 1, 0
        for j in order:
            self.walk(children[j], key + (j,))


def locate(
    patterns: tuple[P.Pattern, ...], path: list[tuple[Any, Any]], stop: tuple[Any, Any] | None
) -> Located:
    """Which value each place of ``patterns`` matched on ``path`` (goals met, in order),
    and the place of ``stop`` (the goal that failed after them)."""
    w = _Walk(path, stop)
    w.walk(patterns[0], (0,))
    for i, pat in enumerate(patterns[1:], 1):
        if w.i < len(w.path) and isinstance(w.path[w.i][0], LaterRoots):
            w.i += 1
        w.walk(pat, (i,))
    return w.out


@dataclass
class Attempt:
    """One rule tried at one node, for ``explain``.

    Attributes:
        rule: the rule.
        node: the candidate for its (first) root.
        match: the match when the rule would fire here, else None.
        failure: why not: an escape or check failure of a full structural match, else the
            deepest structural failure (None when it matches, or when nothing was noted).
        structural: True when no structural solution was found.
        located: which value each place of the pattern matched, and where it stopped
            (for a check or escape failure: the first structural solution; for a match:
            the match).
    """

    rule: Rule
    node: fx.Node
    match: Match | None
    failure: Failure | None
    structural: bool
    located: Located


def explain_candidate(rule: Rule, node: fx.Node) -> Attempt:
    """Try ``rule`` with its first root at ``node`` as :func:`~.search.match_rule` does
    (same solutions, same order), keeping the path to report it. Changes nothing.

    A check that raises is reported as the failure (``the check raised ...``), not raised.
    """
    tracer = PathTracer()
    st = State(tracer)
    first: tuple[Failure, list] | None = None
    for _ in solutions(rule_goals(rule.patterns, node, st), st):
        m = Match.of_state(rule, st)
        try:
            failure = escape_of(m) or m.run_check()
        except GraphfuseError as e:
            failure = Failure("check", (str(e),), node)
        if failure is None:
            return Attempt(rule, node, m, None, False, locate(rule.patterns, tracer.path, None))
        if first is None:
            first = (failure, list(tracer.path))
    if first is not None:
        return Attempt(rule, node, None, first[0], False, locate(rule.patterns, first[1], None))
    located = locate(rule.patterns, tracer.stop_path, tracer.stop)
    return Attempt(rule, node, None, tracer.failure, True, located)
