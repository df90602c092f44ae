"""The matcher: patterns compiled to matchers, run by one loop with an explicit goal list.

A *goal* is "match this matcher at this value"; goals form a linked list of tuples
``(matcher, value, where, rest)`` (``where`` is ``(node, argument index)``, for messages and
dims). :func:`solutions` takes the first goal and calls its matcher's ``step``, which either
fails or returns the goals that remain: a call pushes one goal per argument, ``typed`` its
inner pattern followed by the type test, a capture binds and pushes nothing. Where a
pattern can match in more than one way (``alt``, ``maybe``, a commutative call, a later root
of a multi-output rule) ``step`` pushes a *choice point*: the trail mark and an iterator over
the remaining ways. A failure undoes the state to the newest choice point and takes its next
way; when every goal is met, the state holds one solution.

The order of solutions is the pattern's order: arguments left to right, alternatives in the
order written, commutative calls as written then swapped, ``maybe`` chains longest first.
With a tracer attached every way is tried and every failure noted (``explain``); without
one, ways whose first op cannot be the value's (its *first set*) are skipped unseen, which
changes the work done, never the solutions found.

There is no recursion: a pattern of any depth runs in one Python frame.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch import fx

from .. import dsl as P
from . import args as A
from .simple import FAIL, Capture, Goals, ListOf, Literal, Typed, Wildcard, is_call
from .state import State


def solutions(goals: Goals, st: State) -> Iterator[None]:
    """Yield once for each way every goal in ``goals`` is met; ``st`` then holds it.

    Resuming the iterator undoes that solution and looks for the next one. Abandoning it
    leaves ``st`` as it was at the last yield.

    A tracer with a ``path`` list (``explain --node``) also gets the goals met, as
    (matcher, value), cut back with the state when a choice point is resumed, and the
    goal being taken as ``goal``.
    """
    choices: list[tuple[int, Iterator[Goals]]] = []
    path: list | None = getattr(st.tracer, "path", None)
    marks: list[int] = []  # with a path: its length at each choice point
    while True:
        if goals is None:
            yield
            goals = FAIL
        else:
            matcher, value, where, rest = goals
            st.steps += 1
            if path is None:
                goals = matcher.step(value, where, st, rest, choices)
            else:
                st.tracer.goal = (matcher, value)  # type: ignore[union-attr]
                pushed = len(choices)
                goals = matcher.step(value, where, st, rest, choices)
                if goals is not FAIL:
                    path.append((matcher, value))
                marks += [len(path)] * (len(choices) - pushed)
        while goals is FAIL:
            if not choices:
                return
            mark, ways = choices[-1]
            st.undo(mark)
            if path is not None:
                del path[marks[-1] :]
            goals = next(ways, FAIL)
            if goals is FAIL:
                choices.pop()
                if path is not None:
                    marks.pop()


def _choose(st: State, choices: list, ways: Iterator[Goals]) -> Goals:
    """Take the first of ``ways`` now and keep the rest as a choice point."""
    mark = st.mark()
    first = next(ways, FAIL)
    if first is not FAIL:
        choices.append((mark, ways))
    return first


# ---------------------------------------------------------------------- first sets


def _first_ids(pat: P.Pattern) -> frozenset[int] | None:
    """Ids of the targets (overloads and packets) a node must have for ``pat`` to match
    it; None when ``pat`` may match values that are no call (a capture, a literal)."""
    if isinstance(pat, P.Call):
        return frozenset(map(id, pat.targets))
    if isinstance(pat, P.Typed):
        return _first_ids(pat.inner)
    if isinstance(pat, (P.Alt, P.Maybe)):
        parts = [b for _, b in pat.branches] if isinstance(pat, P.Alt) else [pat.inner]
        sets = [_first_ids(b) for b in parts]
        if any(s is None for s in sets):
            return None
        out = frozenset().union(*sets)  # type: ignore[arg-type]
        return out | frozenset(map(id, pat.targets)) if isinstance(pat, P.Maybe) else out
    return None


def may_start(first: frozenset[int] | None, value: Any) -> bool:
    """Whether a pattern with first set ``first`` may match ``value``."""
    if first is None:
        return True
    if not (isinstance(value, fx.Node) and value.op == "call_function"):
        return False
    t = value.target
    return id(t) in first or id(getattr(t, "overloadpacket", None)) in first


# ------------------------------------------------------------------------ matchers


class Call:
    """``P.op``: a call node of one of the targets, then its arguments."""

    __slots__ = ("pat", "name", "ids", "plans", "shared")

    def __init__(self, pat: P.Call) -> None:
        self.pat, self.name = pat, pat.name
        self.ids = frozenset(map(id, pat.targets))
        self.plans: dict[int, tuple[Any, _Plan]] = {}  # id(target) -> (target, plan)
        # A named call that matches in one way only (a node a traced pattern uses twice):
        # met again at the node it matched, it matches at once.
        self.shared = pat.name is not None and _one_way(pat)

    def plan(self, target: Any) -> _Plan | None:
        hit = self.plans.get(id(target))
        if hit is None or hit[0] is not target:
            ok = id(target) in self.ids or id(getattr(target, "overloadpacket", None)) in self.ids
            if not ok:
                return None
            hit = self.plans[id(target)] = (target, _Plan(self.pat, target))
        return hit[1]

    def step(self, value: Any, where: Any, st: State, goals: Goals, choices: list) -> Goals:
        if not is_call(value):
            st.fail("not_call", where, value, self.pat)
            return FAIL
        target = value.target
        hit = self.plans.get(id(target))
        plan = hit[1] if hit is not None and hit[0] is target else self.plan(target)
        if plan is None:
            st.fail("target", value, self.pat)
            return FAIL
        if self.name is not None:
            if self.shared and st.binds.get(self.name) is value and value in st.node_set:
                return goals
            if not st.bind(self.name, value, where):
                return FAIL
        st.add_node(value)
        if plan.missing is not None:
            st.fail("no_arg", value, plan.missing)
            return FAIL
        args = value.args
        if not plan.direct or len(args) < plan.need:
            args = plan.read(value, st.norm)
            if plan.need > len(args):
                st.fail("arity", value, len(args), self.pat)
                return FAIL
        if plan.swapped is None:
            return _push(plan.items, plan.starts, args, value, st, goals)
        return _choose(st, choices, _orders(plan, args, value, st, goals))

    def rejects(self, node: fx.Node) -> bool:
        """Whether ``node`` fails this call before anything is bound: another target, or
        an argument (read as the node spells it) that cannot start its pattern."""
        plan = self.plan(node.target)
        if plan is None:
            return True
        args = node.args
        if plan.swapped is not None or not plan.direct or len(args) < plan.need:
            return False
        return not _can_start(plan.starts, args)


def _orders(plan: _Plan, args: Any, node: fx.Node, st: State, goals: Goals) -> Iterator[Goals]:
    """A commutative call's two argument orders: as written, then swapped."""
    for items, starts in ((plan.items, plan.starts), plan.swapped):
        pushed = _push(items, starts, args, node, st, goals)
        if pushed is not FAIL:
            yield pushed


def _can_start(starts: tuple, args: Any) -> bool:
    """Whether every argument whose pattern starts with a call (``starts``: schema index,
    first set) is a call of one of the ops that pattern can start with."""
    for idx, first in starts:
        arg = args[idx]
        if not (isinstance(arg, fx.Node) and arg.op == "call_function"):
            return False
        t = arg.target
        if id(t) not in first and id(getattr(t, "overloadpacket", None)) not in first:
            return False
    return True


def _push(items: tuple, starts: tuple, args: Any, node: fx.Node, st: State, goals: Goals) -> Goals:
    """One goal per argument pattern (``items``, last first), first argument first.
    Untraced, an argument whose op cannot be what its pattern starts with (``starts``)
    fails the call before any is matched."""
    if st.tracer is None and not _can_start(starts, args):
        return FAIL
    for idx, matcher in items:
        goals = (matcher, args[idx], (node, idx), goals)
    return goals


class _Plan:
    """How a call pattern reads the arguments of one target: which schema index each
    argument pattern (positional ones, then keywords) matches, with what matcher."""

    __slots__ = ("missing", "need", "direct", "items", "starts", "swapped")

    def __init__(self, pat: P.Call, target: Any) -> None:
        self.missing: str | None = None
        pairs: list[tuple[int, P.Pattern]] = list(enumerate(pat.args))
        for key, sub in pat.kwargs:
            idx = A.arg_index(target, key)
            if idx is None:
                self.missing = key
                break
            pairs.append((idx, sub))
        self.need = max((i for i, _ in pairs), default=-1) + 1
        spec = A.arg_spec(target)
        # Only positional arguments, none a dim: the node's own args, when it spells them.
        self.direct = spec is None or (
            self.missing is None and not ({i for i, _ in pairs} & spec.dim_args)
        )
        self.items, self.starts = _order(pairs)
        self.swapped = None  # a commutative call's other order, as (items, starts)
        if pat.commutative and self.missing is None:
            (i0, p0), (i1, p1) = pairs[0], pairs[1]
            self.swapped = _order([(i0, p1), (i1, p0)] + pairs[2:])

    def read(self, node: fx.Node, norm: dict | None) -> Any:
        """The node's arguments in schema order (normalized where the plan needs it)."""
        if self.direct and len(node.args) >= self.need:
            return node.args
        if norm is None:
            return A.normalize(node)
        # cached while the node's args / kwargs are the same objects (fx replaces them on
        # every edit)
        hit = norm.get(node)
        if hit is not None and hit[0] is node.args and hit[1] is node.kwargs:
            return hit[2]
        out = A.normalize(node)
        norm[node] = (node.args, node.kwargs, out)
        return out


def _order(pairs: list[tuple[int, P.Pattern]]) -> tuple[tuple, tuple]:
    """``items``: (schema index, matcher) per argument pattern, last first (the order goals
    are pushed in); ``starts``: (schema index, first set) of the argument patterns that
    start with a call."""
    items = tuple((i, compiled(p)) for i, p in reversed(pairs))
    firsts = [(i, _first_ids(p)) for i, p in pairs]
    return items, tuple((i, first) for i, first in firsts if first is not None)


class Alt:
    """``a | b`` / ``P.alt``: the branches in order; a named alt records the tag taken."""

    __slots__ = ("name", "branches", "viable")

    def __init__(self, pat: P.Alt) -> None:
        self.name = pat.name
        self.branches = tuple((tag, compiled(b), _first_ids(b)) for tag, b in pat.branches)
        self.viable: dict[int, tuple[Any, tuple]] = {}  # id(target) -> (target, branches)

    def _viable(self, target: Any, value: Any) -> tuple:
        """The branches whose first op may be ``value``'s (``target``: its target, None
        where it is no call), cached per target."""
        kept = tuple(b for b in self.branches if may_start(b[2], value))
        self.viable[id(target)] = (target, kept)
        return kept

    def step(self, value: Any, where: Any, st: State, goals: Goals, choices: list) -> Goals:
        if st.tracer is not None:
            branches = self.branches
        else:
            t = value.target if is_call(value) else None
            hit = self.viable.get(id(t))
            branches = hit[1] if hit is not None and hit[0] is t else self._viable(t, value)
        if len(branches) == 1:  # one way: no choice point, the branch's step at once
            tag, matcher, _ = branches[0]
            if self.name is not None:
                st.put(st.tags, self.name, tag)
            return matcher.step(value, where, st, goals, choices)
        return _choose(st, choices, self._ways(branches, value, where, st, goals))

    def _ways(self, branches: tuple, value: Any, where: Any, st: State, goals: Goals):
        for tag, matcher, _ in branches:
            if self.name is not None:
                st.put(st.tags, self.name, tag)
            yield (matcher, value, where, goals)


class Maybe:
    """``P.maybe``: zero or more calls of the chain targets (each through its first
    argument) in front of the inner pattern; longest chain first."""

    __slots__ = ("name", "ids", "where", "inner", "first", "links")

    def __init__(self, pat: P.Maybe) -> None:
        self.name, self.where = pat.name, pat.where
        self.ids = frozenset(map(id, pat.targets))
        self.inner, self.first = compiled(pat.inner), _first_ids(pat.inner)
        self.links: dict[int, tuple[Any, bool]] = {}  # id(target) -> (target, a chain op)

    def _links(self, node: Any) -> bool:
        """Whether the chain passes through ``node``."""
        if not is_call(node):
            return False
        t = node.target
        hit = self.links.get(id(t))
        if hit is None or hit[0] is not t:
            ok = id(t) in self.ids or id(getattr(t, "overloadpacket", None)) in self.ids
            hit = self.links[id(t)] = (t, ok)
        return hit[1] and bool(node.args) and (self.where is None or bool(self.where(node)))

    def step(self, value: Any, where: Any, st: State, goals: Goals, choices: list) -> Goals:
        if not self._links(value):  # one way: the inner pattern's step at once
            if self.name is not None:
                st.put(st.chains, self.name, ())
            return self.inner.step(value, where, st, goals, choices)
        chain = [value]
        end = value.args[0]
        while self._links(end):
            chain.append(end)
            end = end.args[0]
        return _choose(st, choices, self._ways(chain, end, where, st, goals))

    def _ways(self, chain: list, end: Any, where: Any, st: State, goals: Goals):
        traced = st.tracer is not None
        for i in range(len(chain), -1, -1):
            at = end if i == len(chain) else chain[i]
            if not traced and not may_start(self.first, at):
                continue
            for node in chain[:i]:
                st.add_node(node)
            if self.name is not None:
                st.put(st.chains, self.name, tuple(chain[:i]))
            yield (self.inner, at, (chain[i - 1], 0) if i else where, goals)


class LaterRoots:
    """The ``i``-th pattern of a multi-output rule: found among the users of what the
    match holds so far (its nodes and bound inputs), each candidate in turn."""

    __slots__ = ("matcher", "rest")

    def __init__(self, matcher: Any, rest: LaterRoots | None) -> None:
        self.matcher, self.rest = matcher, rest

    def step(self, value: Any, where: Any, st: State, goals: Goals, choices: list) -> Goals:
        return _choose(st, choices, self._ways(st, goals))

    def _ways(self, st: State, goals: Goals):
        held = list(st.nodes) + [v for v in st.binds.values() if isinstance(v, fx.Node)]
        seen: set[fx.Node] = set()
        after = goals if self.rest is None else (self.rest, None, None, goals)
        for node in held:
            for cand in node.users:
                if cand in seen or cand in st.node_set or cand.op != "call_function":
                    continue
                seen.add(cand)
                st.add_root(cand)
                yield (self.matcher, cand, None, after)


# ----------------------------------------------------------------------- compiling


_KINDS: dict[type, Any] = {P.Call: Call, P.Capture: Capture, P.Literal: Literal, P.Alt: Alt}
_KINDS[P.Maybe] = Maybe
_COMPILED: dict[int, tuple[Any, P.Pattern]] = {}  # id(pattern) -> (matcher, pattern)
_WILDCARD = Wildcard()


def compiled(pat: P.Pattern) -> Any:
    """The matcher of ``pat``, made once per pattern value (a sub-pattern shared by many
    rules or used twice in one is compiled once)."""
    hit = _COMPILED.get(id(pat))
    if hit is not None:
        return hit[0]
    if isinstance(pat, P.Wildcard):
        return _WILDCARD
    if isinstance(pat, P.ListOf):
        matcher: Any = ListOf(pat, tuple(compiled(p) for p in pat.items))
    elif isinstance(pat, P.Typed):
        matcher = Typed(pat, compiled(pat.inner))
    elif type(pat) in _KINDS:
        matcher = _KINDS[type(pat)](pat)
    else:
        raise TypeError(f"not a pattern: {pat!r}")
    _COMPILED[id(pat)] = (matcher, pat)
    return matcher


def rejects_at_once(pattern: P.Pattern, node: fx.Node) -> bool:
    """Whether a rule whose first pattern is ``pattern`` cannot match at ``node``, seen
    without starting a search (its root call's target and arguments' first ops)."""
    matcher = compiled(pattern)
    return isinstance(matcher, Call) and matcher.rejects(node)


def rule_goals(patterns: tuple[P.Pattern, ...], node: fx.Node, st: State) -> Goals:
    """The goals of a rule whose first pattern is rooted at ``node``."""
    later = None
    for pat in reversed(patterns[1:]):
        later = LaterRoots(compiled(pat), later)
    st.add_root(node)
    rest = None if later is None else (later, None, None, None)
    return (compiled(patterns[0]), node, None, rest)


def _one_way(pat: P.Pattern) -> bool:
    """A pattern that matches a given value in at most one way (no alt, maybe or
    commutative call inside)."""
    if isinstance(pat, (P.Literal, P.Wildcard, P.Capture)):
        return True
    if isinstance(pat, P.Typed):
        return _one_way(pat.inner)
    if isinstance(pat, P.ListOf):
        return all(_one_way(p) for p in pat.items)
    if isinstance(pat, P.Call):
        subs = pat.args + tuple(v for _, v in pat.kwargs)
        return not pat.commutative and all(_one_way(p) for p in subs)
    return False
