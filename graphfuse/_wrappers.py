"""Wrapper matchers of the compiled engine (``_engine.py``): ``alt`` and ``maybe``, and
their resolution by a value's target on the fast path."""

from __future__ import annotations

import operator
from typing import Any

from torch import fx

from . import dsl as P
from ._codegen import _first_table
from ._entries import entry
from ._leafcode import _ARGS
from ._matcher import (
    Cont,
    _first_set,
    _ids_may,
    _probe,
    _State,
)


def compiled(pat: P.Pattern) -> Any:
    """``_engine.compiled`` (the registry lives with the engine, which imports this module)."""
    from ._engine import compiled as _compiled

    return _compiled(pat)


# --------------------------------------------------------------------------- resolution
# On the fast path, an ``alt`` of which a single branch may start at a value's target, or
# a ``maybe`` whose chain cannot start at it, passes the value on to one inner matcher,
# knowing by the target alone the tags / empty chains it records on the way. Such a run of
# wrappers is resolved once per target into (final matcher, tags, chain names, wrappers
# skipped) and matched in one step: the same matches, state and visit counts as walking
# through each wrapper, without a Python call per wrapper.

_FAIL = object()  # the final matcher of a resolution that certainly fails
# ``node.args`` of a node known to be a call (fx.Node.args is a property reading the
# ``_args`` slot: read the slot where the property is only that)
_args = operator.attrgetter(_ARGS)
_NODE = fx.Node


def _resolution(matcher: Any, value: Any) -> tuple:
    """(final, ((alt name, tag), ...), (maybe name, ...), wrappers skipped) for ``value``'s
    target; final is ``matcher`` itself where it cannot be resolved (several ways), or
    ``_FAIL``. Cached per target on the wrapper."""
    res = getattr(matcher, "res", None)
    if res is None:
        return (matcher, (), (), 0)
    t = value.target if isinstance(value, fx.Node) and value.op == "call_function" else None
    hit = res.get(id(t))
    if hit is None or hit[0] is not t:
        hit = res[id(t)] = (t, *matcher.resolve(value))
    return hit[1:]


class _Wrapper:
    """An ``alt`` or ``maybe``: ``walk`` tries its ways; on the fast path a call node goes
    through the wrapper's entry for its target, any other value through the entry for
    values that are no call (:func:`graphfuse._codegen.entry`: resolved to one inner
    matcher where that allows)."""

    __slots__ = ()

    def walk(self, value: Any, st: _State, where: tuple | None, k: Cont, fast: bool) -> bool:
        raise NotImplementedError

    def fast(self, value: Any, st: _State, where: tuple | None, k: Cont) -> bool:
        t = value.target if isinstance(value, fx.Node) and value.op == "call_function" else None
        hit = self.table.get(id(t))  # type: ignore[attr-defined]
        if hit is None or hit[0] is not t:
            hit = entry(self, self.table, value)  # type: ignore[attr-defined]
        return hit[1](value, st, where, k)

    def m(self, value: Any, st: _State, where: tuple | None, k: Cont) -> bool:
        if st.fast:
            return self.fast(value, st, where, k)
        return self.walk(value, st, where, k, False)


class _CAlt(_Wrapper):
    __slots__ = ("pat", "name", "branches", "by_target", "res", "table")

    def __init__(self, pat: P.Alt) -> None:
        self.pat, self.name = pat, pat.name
        self.branches = tuple((tag, compiled(b), _first_set(b)) for tag, b in pat.branches)
        self.by_target: dict[int, tuple[Any, tuple]] = {}
        self.res: dict[int, tuple] = {}  # id(target) -> (target, *resolution)
        self.table: dict[int, tuple] = {}  # id(target) -> (target, entry): see _codegen

    def resolve(self, value: Any) -> tuple:
        """See :func:`_resolution`: one branch may match ``value``'s target, or none."""
        kept = self._fast_branches(value)
        if not kept:
            return (_FAIL, (), (), 1)
        if len(kept) > 1:
            return (self, (), (), 0)
        tag, branch, _ = kept[0]
        final, tags, chains, skipped = _resolution(branch, value)
        if self.name is not None:
            tags = ((self.name, tag),) + tags
        return (final, tags, chains, skipped + 1)

    def _fast_branches(self, value: Any) -> tuple:
        """The branches that may match ``value``, cached per target."""
        t = value.target if isinstance(value, fx.Node) and value.op == "call_function" else None
        hit = self.by_target.get(id(t))
        if hit is None or hit[0] is not t:
            kept = tuple(b for b in self.branches if _ids_may(b[2], value))
            hit = self.by_target[id(t)] = (t, kept)
        return hit[1]

    def walk(self, value: Any, st: _State, where: tuple | None, k: Cont, fast: bool) -> bool:
        """Each branch in turn (on the fast path only those that may start at the value)."""
        st.visits += 1
        name = self.name
        for tag, branch, _ in self._fast_branches(value) if fast else self.branches:
            mark = len(st.trail)
            if name is not None:
                st.put(st.tags, name, tag)
            if (branch.fast if fast else branch.m)(value, st, where, k):
                return True
            st.undo(mark)
        return False


class _CMaybe(_Wrapper):
    __slots__ = (
        "exact",
        "packets",
        "where",
        "name",
        "inner",
        "inner_first",
        "inner_table",
        "by_target",
        "steps",
        "res",
        "table",
    )

    def __init__(self, pat: P.Maybe) -> None:
        self.exact, self.packets = _first_set(_probe(pat.targets))  # type: ignore[misc]
        self.where, self.name = pat.where, pat.name
        self.inner, self.inner_first = compiled(pat.inner), _first_set(pat.inner)
        # the inner pattern's entries by target, where it may start (see ``walk``): the
        # table generated code keeps for the inner matcher
        self.inner_table = _first_table(self.inner)
        # id(target) -> (target, is a chain op, the inner pattern may start at it);
        # target None for a value that is not a call
        self.by_target: dict[int, tuple[Any, bool, bool]] = {}
        # per path (traced, fast): id(target) -> (target, is a chain op, function), see _step
        self.steps: tuple[dict[int, tuple], dict[int, tuple]] = ({}, {})
        self.res: dict[int, tuple] = {}  # id(target) -> (target, *resolution)
        self.table: dict[int, tuple] = {}  # id(target) -> (target, entry): see _codegen

    def resolve(self, value: Any) -> tuple:
        """See :func:`_resolution`: ``value``'s target is no chain op, so no chain."""
        _, chain_op, may = self._kind(value)
        if chain_op:
            return (self, (), (), 0)
        if not may:
            return (_FAIL, (), (), 1)
        final, tags, chains, skipped = _resolution(self.inner, value)
        if self.name is not None:
            chains = (self.name,) + chains
        return (final, tags, chains, skipped + 1)

    def _kind(self, value: Any) -> tuple[Any, bool, bool]:
        """What this maybe knows of ``value`` by its target alone (cached per target)."""
        call = isinstance(value, fx.Node) and value.op == "call_function"
        t = value.target if call else None
        hit = self.by_target.get(id(t))
        if hit is None or hit[0] is not t:
            chain_op = call and (
                id(t) in self.exact
                or bool(self.packets)
                and id(getattr(t, "overloadpacket", None)) in self.packets
            )
            may = self.inner_first is None or _ids_may(self.inner_first, value)
            hit = self.by_target[id(t)] = (t, chain_op, may)
        return hit

    def walk(self, value: Any, st: _State, where: tuple | None, k: Cont, fast: bool) -> bool:
        return self.stepped(fast, 1, value, st, where, k)

    def stepped(
        self, fast: bool, visits: int, value: Any, st: _State, where: tuple | None, k: Cont
    ) -> bool:
        """The chains through the value, longest first, then the inner pattern at each;
        ``visits``: this maybe's and those of the wrappers resolved in front of it (an
        entry takes both bound, ``partial(stepped, True, visits)``). Per step:
        node arguments read from the slot, the target looked up in the path's ``steps``
        table directly (is it a chain op; the inner pattern's function there, see
        :meth:`_step`), nodes added to the state in place."""
        st.visits += visits
        test, name = self.where, self.name
        steps_of = self.steps[fast]
        t = (
            value.target
            if (value.__class__ is _NODE or isinstance(value, _NODE))
            and value.op == "call_function"
            else None
        )
        kind = steps_of.get(id(t))  # (self._step(value, fast), its cached case inline)
        if kind is None or kind[0] is not t:
            kind = self._step(value, fast)
        args = _args(value) if kind[1] else None
        if not (args and (test is None or test(value))):
            # no chain: the inner pattern at the value itself
            inner = kind[2]
            if inner is None:
                return False
            if name is None:
                return inner(value, st, where, k)
            mark = len(st.trail)
            st.put(st.chains, name, ())
            if inner(value, st, where, k):
                return True
            st.undo(mark)
            return False
        # (value, chain passed through to reach it, the inner pattern's function): the
        # steps where the inner pattern is tried
        steps: list[tuple[Any, tuple, Any]] = [(value, (), kind[2])] if kind[2] else []
        chain: tuple = (value,)
        cur = args[0]
        while True:
            t = (
                cur.target
                if (cur.__class__ is _NODE or isinstance(cur, _NODE)) and cur.op == "call_function"
                else None
            )
            kind = steps_of.get(id(t))
            if kind is None or kind[0] is not t:
                kind = self._step(cur, fast)
            if kind[2] is not None:
                steps.append((cur, chain, kind[2]))
            if not kind[1]:
                break
            args = _args(cur)
            if not (args and (test is None or test(cur))):
                break
            chain += (cur,)
            cur = args[0]
        trail, ns, nodes, chains = st.trail, st.node_set, st.nodes, st.chains
        for inner_value, through, inner in reversed(steps):  # longest chain first
            mark = len(trail)
            for n in through:
                if n not in ns:
                    nodes.append(n)
                    ns.add(n)
                    trail.append((None, None))
            if name is not None:
                chains[name] = through
                trail.append((chains, name))
            if inner(inner_value, st, where if not through else (through[-1], 0), k):
                return True
            st.undo(mark)
        return False

    def _step(self, value: Any, fast: bool) -> tuple:
        """(target, is a chain op, the inner pattern's function at ``value``: on the fast
        path its entry where it may start there, else None; on the traced path its
        ``m``), cached per target in ``steps[fast]``."""
        t, chain_op, may = self._kind(value)
        if fast:
            fn = self._inner(value, t) if may else None
        else:
            fn = self.inner.m
        hit = self.steps[fast][id(t)] = (t, chain_op, fn)
        return hit

    def _inner(self, value: Any, t: Any) -> Any:
        """The inner pattern's entry at ``value`` (of target ``t``; None: no call), where
        it may start: what ``self.inner.fast`` dispatches to, without the dispatch."""
        hit = self.inner_table.get(id(t))
        if hit is None or hit[0] is not t:
            hit = entry(self.inner, self.inner_table, value, self.inner_first)
        return hit[1]
