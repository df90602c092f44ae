"""Wrapper matchers of the compiled engine (``_engine.py``): ``alt`` and ``maybe``, and
their resolution by a value's target on the fast path."""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch import fx

from . import dsl as P
from ._codegen import _first_table
from ._entries import entry
from ._leafcode import _ARGS, _define, _Source
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
        "ends_only",
        "walkers",
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
        # on the fast path, the inner pattern may only start where a chain ends: it can
        # start at no chain op (``walker`` then tries one step, no list of them)
        self.ends_only = _disjoint(pat.targets, self.inner_first)
        self.walkers: dict[tuple[bool, int], Any] = {}  # (fast, visits) -> walker
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
        return self.walker(fast, 1)(value, st, where, k)

    def walker(self, fast: bool, visits: int) -> Any:
        """The function ``fn(value, st, where, k)`` trying the chains through the value,
        longest first, then the inner pattern at each, generated for this maybe and path
        (its name, test and ``steps`` table as constants; see :func:`_walk_source`);
        ``visits``: this maybe's and those of the wrappers resolved in front of it."""
        fn = self.walkers.get((fast, visits))
        if fn is None:
            fn = self.walkers[(fast, visits)] = _walk_source(self, fast, visits)
        return fn

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


def _disjoint(chain_targets: tuple, first: Any) -> bool:
    """Whether no chain op (exact overloads only: a packet is not judged) is in the
    first set ``first`` (None: anything)."""
    if first is None:
        return False
    exact, packets = first
    for t in chain_targets:
        if isinstance(t, torch._ops.OpOverloadPacket):
            return False
        if id(t) in exact or id(getattr(t, "overloadpacket", None)) in packets:
            return False
    return True


def _walk_source(maybe: _CMaybe, fast: bool, visits: int) -> Any:
    """A maybe's walk on one path: per node, its target looked up in the path's
    ``steps`` table (is it a chain op; the inner pattern's function there, see
    :meth:`_CMaybe._step`), node arguments read from the slot. The chain is followed to
    its end first and the inner pattern tried there (the longest chain, which is what
    usually matches); only if that fails are the shorter chains tried, longest first,
    each node's function looked up again (cached). The chain's nodes are added to the
    state in place. Where the inner pattern can start at no chain op (``ends_only``, on
    the fast path) there are no shorter chains to try."""
    src = _Source()
    src.consts.update(STEPS=maybe.steps[fast], STEP=maybe._step, FAST=fast, TEST=maybe.where)
    name = None if maybe.name is None else repr(maybe.name)
    test = "" if maybe.where is None else " and TEST({0})"
    call = "({0}.__class__ is Node or isinstance({0}, Node)) and {0}.op == 'call_function'"

    def kind_of(var: str) -> None:
        src.emit(f"if {call.format(var)}:")
        src.emit(f"    t = {var}.target")
        src.emit("else:")
        src.emit("    t = None")
        src.emit("kind = STEPS.get(id(t))")
        src.emit("if kind is None or kind[0] is not t:")
        src.emit(f"    kind = STEP({var}, FAST)")

    def attempt(var: str, through: str | None, where: str) -> None:
        """The inner pattern (``inner``) at ``var`` through the chain ``through`` (a
        local; None: no chain), state undone if it fails."""
        src.emit("mark = len(trail)")
        if through is not None:
            src.emit(f"for n in {through}:")
            src.emit("    if n not in ns:")
            src.emit("        nodes.append(n)")
            src.emit("        ns.add(n)")
            src.emit("        trail.append((None, None))")
        if name is not None:
            src.emit(f"chains[{name}] = {through or '()'}")
            src.emit(f"trail.append((chains, {name}))")
        src.emit(f"if inner({var}, st, {where}, k):")
        src.emit("    return True")
        src.emit("st.undo(mark)")

    src.emit(f"st.visits += {visits}")
    kind_of("value")
    src.emit(f"args = value.{_ARGS} if kind[1] else None")
    src.emit(f"if not (args{test.format('value')}):")  # no chain: the inner at the value
    src.depth += 1
    src.emit("inner = kind[2]")
    src.emit("if inner is None:")
    src.emit("    return False")
    if name is None:
        src.emit("return inner(value, st, where, k)")
    else:
        src.emit("trail = st.trail")
        src.emit("chains = st.chains")
        attempt("value", None, "where")
        src.emit("return False")
    src.depth -= 1
    src.emit("chain = (value,)")
    src.emit("cur = args[0]")
    src.emit("while True:")
    src.depth += 1
    kind_of("cur")
    src.emit("if not kind[1]:")
    src.emit("    break")
    src.emit(f"args = cur.{_ARGS}")
    src.emit(f"if not (args{test.format('cur')}):")
    src.emit("    break")
    src.emit("chain += (cur,)")
    src.emit("cur = args[0]")
    src.depth -= 1
    src.emit("trail = st.trail")
    src.emit("ns = st.node_set")
    src.emit("nodes = st.nodes")
    if name is not None:
        src.emit("chains = st.chains")
    src.emit("inner = kind[2]")  # the whole chain
    src.emit("if inner is not None:")
    src.depth += 1
    attempt("cur", "chain", "(chain[-1], 0)")
    src.depth -= 1
    if not (fast and maybe.ends_only):  # the shorter chains: each chain node, last first
        src.emit("for i in range(len(chain) - 1, -1, -1):")
        src.depth += 1
        src.emit("cur = chain[i]")
        kind_of("cur")
        src.emit("inner = kind[2]")
        src.emit("if inner is not None:")
        src.depth += 1
        src.emit("through = chain[:i]")
        attempt("cur", "through", "(chain[i - 1], 0) if i else where")
        src.depth -= 2
    src.emit("return False")
    return _define(src, "walk", f"<graphfuse walk {maybe.name} {fast} {visits}>")
