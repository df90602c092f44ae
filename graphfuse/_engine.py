"""The compiled matching engine: every pattern becomes a tree of matcher objects.

``compiled(pat).m(value, st, where, k)`` calls the continuation ``k()`` each time ``pat``
matched ``value`` (having extended the shared :class:`~graphfuse._matcher._State`), undoes
its own changes before trying the next way, and returns True as soon as a ``k()`` does.

Two paths with that contract: ``m`` walks every way and reports each failure to the
state's tracer (``explain``); ``fast`` (no tracer: ``apply``, dry runs) runs Python
generated per (call pattern, target) by :mod:`graphfuse._codegen`, skipping the ways whose
first op cannot match. Both find the same matches in the same order
(``tests/fuzz/test_fast_path_equivalence.py``).
"""

from __future__ import annotations

import operator
from typing import Any

from torch import fx

from . import dsl as P
from ._args import (
    _NO_DEFAULT,
    _rank,
    arg_index,
    arg_spec,
    canonical_dim,
    needs_rank,
    normalize,
)
from ._codegen import _first_table, generate
from ._entries import entry
from ._leafcode import _ARGS
from ._leaves import _CCapture, _CListOf, _CLiteral, _CTyped, _CWildcard
from ._matcher import (
    Cont,
    _bind,
    _first_set,
    _ids_may,
    _one_way,
    _probe,
    _State,
)


class _CCall:
    __slots__ = ("pat", "exact", "packets", "name", "plans", "shared")

    def __init__(self, pat: P.Call) -> None:
        self.pat = pat
        self.exact, self.packets = _first_set(pat)  # type: ignore[misc]
        self.name = pat.name
        self.plans: dict[int, _Plan] = {}
        # A named one-way call is a shared node (a traced DAG names nodes used twice):
        # once it matched a node, meeting it again at that node matches at once, where
        # re-walking its whole sub-pattern could only bind the same values again.
        self.shared = pat.name is not None and _one_way(pat)

    def plan_for(self, t: Any) -> _Plan | None:
        """The plan for calls of ``t`` (made on first use), None when ``t`` is none of
        the pattern's targets."""
        plan = self.plans.get(id(t))
        if plan is None or plan.target is not t:
            if id(t) not in self.exact and not (
                self.packets and id(getattr(t, "overloadpacket", None)) in self.packets
            ):
                return None
            plan = self.plans[id(t)] = _Plan(self, t)
        return plan

    def fast(self, value: Any, st: _State, where: tuple | None, k: Cont) -> bool:
        """The fast path (no tracer): the generated function of the value's target."""
        plan = (
            self.plan_for(value.target)
            if isinstance(value, fx.Node) and value.op == "call_function"
            else None
        )
        if plan is None:
            st.visits += 1
            return False
        return plan.fast(value, st, where, k)

    def m(self, value: Any, st: _State, where: tuple | None, k: Cont) -> bool:
        if st.fast:
            return self.fast(value, st, where, k)
        st.visits += 1
        if not isinstance(value, fx.Node) or value.op != "call_function":
            st.fail("not_call", where, value, self.pat)
            return False
        plan = self.plan_for(value.target)
        if plan is None:
            st.fail("target", value, self.pat)
            return False
        mark = len(st.trail)
        if self.name is not None and not _bind(st, self.name, value, where):
            return False
        if self.shared:
            st.put(st.done, (self, value), True)
        st.add_node(value)
        args = value.args
        if not plan.direct or plan.need > len(args):
            args = plan.read(value) if plan.reads is not None else _normalized(value, st.norm)
        if plan.missing is not None:
            st.fail("no_arg", value, plan.missing)
            st.undo(mark)
            return False
        if plan.need > len(args):
            st.fail("arity", value, len(args), self.pat)
            st.undo(mark)
            return False
        if _m_args(plan.items, 0, args, value, st, k):
            return True
        if plan.swapped is not None and _m_args(plan.swapped, 0, args, value, st, k):
            return True
        st.undo(mark)
        return False


def _normalized(node: fx.Node, norm: dict | None) -> list:
    """``normalize(node)``, cached in ``norm`` while the node's args / kwargs are the same
    objects (fx replaces them on every edit). The rank that canonicalises dims comes from
    the first argument's ``meta["val"]``; rewrites never change an existing node's."""
    if norm is None:
        return normalize(node)
    hit = norm.get(node)
    if hit is not None and hit[0] is node.args and hit[1] is node.kwargs:
        return hit[2]
    args = normalize(node)
    norm[node] = (node.args, node.kwargs, args)
    return args


class _Plan:
    """How a :class:`P.Call` reads one target's arguments: (schema index, compiled pattern,
    first set) in pattern order (``items``, ``swapped``: the traced path), and ``fast``,
    the generated function of the fast path (:mod:`graphfuse._codegen`), generated on
    first use (:meth:`code`: a call inlined into its parent's code needs only the plan)."""

    __slots__ = ("target", "missing", "need", "direct", "items", "swapped", "reads", "first")
    __slots__ += ("call", "pairs", "swapped_pairs", "generated", "fast")

    def __init__(self, call: _CCall, target: Any) -> None:
        pat = call.pat
        self.target = target
        self.missing: str | None = None
        pairs: list[tuple[int, P.Pattern]] = list(enumerate(pat.args))
        for key, sub in pat.kwargs:
            idx = arg_index(target, key)
            if idx is None:
                self.missing = key
                break
            pairs.append((idx, sub))
        self.need = max((i for i, _ in pairs), default=-1) + 1
        # Reading only positional arguments the node spells, none of them a dim: those
        # are the node's own args (normalize would return them unchanged), no copy needed.
        spec = arg_spec(target)
        self.direct = self.missing is None and (
            spec is None or not ({i for i, _ in pairs} & spec.dim_args)
        )
        swapped = (
            [(pairs[1][0], pairs[0][1]), (pairs[0][0], pairs[1][1])] + pairs[2:]
            if pat.commutative and self.missing is None
            else None
        )

        def items(ps: list[tuple[int, P.Pattern]]) -> list[tuple]:
            return [(i, compiled(p), _first_set(p)) for i, p in ps]

        self.items = items(pairs)
        self.swapped = items(swapped) if swapped else None
        # What ``read`` needs of the schema: per argument the pattern reads, (index, name,
        # default, is a dim); the first argument's (name, default) for the dims' rank.
        self.reads: tuple | None = None
        self.first: tuple = ()
        if spec is not None and self.missing is None and self.need <= len(spec.names):
            fill = tuple(None if d is _NO_DEFAULT else d for d in spec.defaults)
            self.reads = tuple(
                (i, spec.names[i], fill[i], i in spec.dim_args)
                for i in sorted({i for i, _ in pairs})
            )
            self.first = (spec.names[0], fill[0]) if spec.names else ()
        self.call, self.pairs, self.swapped_pairs = call, pairs, swapped
        self.generated: Any = None
        self.fast = self._first_fast

    def code(self) -> Any:
        """The generated function (made now if not yet); ``fast`` from then on."""
        if self.generated is None:
            self.generated = self.fast = generate(self.call, self, self.pairs, self.swapped_pairs)
        return self.generated

    def _first_fast(self, value: Any, st: _State, where: tuple | None, k: Cont) -> bool:
        return self.code()(value, st, where, k)

    def read(self, node: fx.Node) -> list:
        """``normalize(node)`` at the positions this plan reads (the others None): the
        keyword, else the positional argument, else the schema default; dims made
        non-negative with the rank of the (normalized) first argument."""
        return self.read_ranked(node)[0]

    def read_ranked(self, node: fx.Node) -> tuple[list, Any]:
        """(:meth:`read`, the rank its dims were made non-negative with: an int, None
        where unknown, or ``_NO_DEFAULT`` where none needed it: the rank is only looked
        up for a dim that is not already non-negative). Generated code compares a
        pattern's negative dim literal with that rank (``_codegen._leaf``), looking it
        up (:meth:`rank`) where it was not."""
        args, kwargs = node.args, node.kwargs
        out: list = [None] * self.need
        rank: Any = _NO_DEFAULT
        for i, name, default, is_dim in self.reads:  # type: ignore[union-attr]
            if name in kwargs:
                v = kwargs[name]
            elif i < len(args):
                v = args[i]
            else:
                v = default
            if is_dim and not (type(v) is int and v >= 0) and needs_rank(v):
                if rank is _NO_DEFAULT:
                    rank = self.rank(node)
                v = canonical_dim(v, rank)
            out[i] = v
        return out, rank

    def rank(self, node: fx.Node) -> int | None:
        """The rank of ``node``'s (normalized) first argument, which makes its dims
        non-negative."""
        kwargs = node.kwargs
        name0, default0 = self.first
        args = node.args
        return _rank(kwargs[name0] if name0 in kwargs else args[0] if args else default0)


def _m_args(items: list, i: int, args: list, node: fx.Node, st: _State, k: Cont) -> bool:
    if i == len(items):  # a pattern with no arguments
        return k()
    idx, sub, first = items[i]
    arg = args[idx]
    if i + 1 == len(items):
        return sub.m(arg, st, (node, idx), k)
    return sub.m(arg, st, (node, idx), lambda: _m_args(items, i + 1, args, node, st, k))


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
        """The chains through the value, longest first, then the inner pattern at each.
        (Per step: node arguments read from the slot, targets looked up in ``by_target``
        directly, nodes added to the state in place; on the fast path the inner pattern
        is called through its entry for the step's target, see ``_inner``.)"""
        st.visits += 1
        test, name, by_target = self.where, self.name, self.by_target
        t = (
            value.target
            if (value.__class__ is fx.Node or isinstance(value, fx.Node))
            and value.op == "call_function"
            else None
        )
        kind = by_target.get(id(t))  # (self._kind(value), its cached case inline)
        if kind is None or kind[0] is not t:
            kind = self._kind(value)
        args = _args(value) if kind[1] else None
        if not (args and (test is None or test(value))):
            # no chain: the inner pattern at the value itself
            if fast and not kind[2]:
                return False
            inner = self._inner(value, kind[0]) if fast else self.inner.m
            if name is None:
                return inner(value, st, where, k)
            mark = len(st.trail)
            st.put(st.chains, name, ())
            if inner(value, st, where, k):
                return True
            st.undo(mark)
            return False
        # (value, chain passed through to reach it, target): the steps where the inner
        # pattern is tried (on the fast path, only those where it may start)
        steps: list[tuple[Any, tuple, Any]] = [(value, (), kind[0])] if kind[2] or not fast else []
        chain: tuple = (value,)
        cur = args[0]
        while True:
            node = cur.__class__ is fx.Node or isinstance(cur, fx.Node)
            t = cur.target if node and cur.op == "call_function" else None
            kind = by_target.get(id(t))  # type: ignore[assignment]
            if kind is None or kind[0] is not t:
                kind = self._kind(cur)
            if kind[2] or not fast:
                steps.append((cur, chain, t))
            args = _args(cur) if kind[1] else None
            if not (args and (test is None or test(cur))):
                break
            chain += (cur,)
            cur = args[0]
        trail, ns, nodes, chains = st.trail, st.node_set, st.nodes, st.chains
        table = self.inner_table
        for inner_value, through, t in reversed(steps):  # longest chain first
            mark = len(trail)
            for n in through:
                if n not in ns:
                    nodes.append(n)
                    ns.add(n)
                    trail.append((None, None))
            if name is not None:
                chains[name] = through
                trail.append((chains, name))
            if fast:
                hit = table.get(id(t))
                inner = hit[1] if hit is not None and hit[0] is t else self._inner(inner_value, t)
            else:
                inner = self.inner.m
            if inner(inner_value, st, where if not through else (through[-1], 0), k):
                return True
            st.undo(mark)
        return False

    def _inner(self, value: Any, t: Any) -> Any:
        """The inner pattern's entry at ``value`` (of target ``t``; None: no call), where
        it may start: what ``self.inner.fast`` dispatches to, without the dispatch."""
        hit = self.inner_table.get(id(t))
        if hit is None or hit[0] is not t:
            hit = entry(self.inner, self.inner_table, value, self.inner_first)
        return hit[1]


_KINDS: dict[type, Any] = {
    P.Call: _CCall,
    P.Capture: _CCapture,
    P.Literal: _CLiteral,
    P.Typed: _CTyped,
    P.Alt: _CAlt,
    P.Maybe: _CMaybe,
    P.ListOf: _CListOf,
}
_COMPILED: dict[int, tuple[Any, P.Pattern]] = {}  # id(pattern) -> (matcher, pattern)


def compiled(pat: P.Pattern) -> Any:
    """The matcher object of ``pat`` (compiled on first use; holds the pattern alive)."""
    hit = _COMPILED.get(id(pat))
    if hit is not None:
        return hit[0]
    kind = type(pat)
    if kind is P.Wildcard:
        node: Any = _CWildcard()
    elif kind in _KINDS:
        node = _KINDS[kind](pat)
    else:
        raise TypeError(f"not a pattern: {pat!r}")
    _COMPILED[id(pat)] = (node, pat)
    return node


def _m(pat: P.Pattern, value: Any, st: _State, where: tuple | None, k: Cont) -> bool:
    """Match ``pat`` at ``value``: calls ``k()`` for each way it matches; True as soon as a
    ``k()`` returns True (the state is then left as it is), else False, state restored."""
    c = compiled(pat)
    return c.fast(value, st, where, k) if st.fast else c.m(value, st, where, k)
