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
from ._codegen import generate
from ._leaves import _CCapture, _CListOf, _CLiteral, _CTyped, _CWildcard
from ._matcher import (
    Cont,
    _bind,
    _first_set,
    _one_way,
    _State,
)
from ._wrappers import _CAlt, _CMaybe


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
        up for a dim that is not already non-negative). Generated code reads a node
        this way only where it does not spell the arguments positionally (else it reads
        them in place, ``_codegen._read_args``); a dim literal is compared as spelled,
        then both made non-negative with that rank (``_leafcode._leaf``), looked up
        (:meth:`rank`) where it was not."""
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
