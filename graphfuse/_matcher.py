"""Matching patterns against an ``fx.Graph``: no tracing, backtracking over node arguments.

This module holds the matching state (:class:`_State`, one mutable state with an undo
trail), first sets and the leaf tests. The engine (:mod:`graphfuse._engine`) is one
matcher object per pattern node in continuation-passing style: ``_m(pat, value, st, where,
k)`` calls the continuation ``k()`` each time ``pat`` matched (having extended the state),
undoes its own changes before trying the next way, and stops as soon as a ``k()`` returns
True (the whole match was accepted). No generators: a success reaches the next pattern in
one call, where a ``yield`` would climb back through every enclosing generator. Failures
are reported to an optional tracer as cheap tuples; sentences are only built when
somebody asks (``explain``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import torch
from torch import fx

from . import dsl as P
from ._args import arg_spec, canonical_dim, first_tensor_rank
from ._dims import same_size
from ._failure import Failure

Cont = Callable[[], bool]  # a continuation: True stops the search

_ASSERT_TARGETS = frozenset(
    t
    for t in (
        getattr(torch.ops.aten, "_assert_tensor_metadata", None),
        getattr(torch.ops.aten, "sym_constrain_range", None),
        getattr(torch.ops.aten, "sym_constrain_range_for_size", None),
        getattr(torch.ops.aten, "_assert_scalar", None),
    )
    if t is not None
    for t in ([t.default] if hasattr(t, "default") else [t])
)


# by id: hashing an OpOverload runs Python code (the targets above live as long as torch)
_ASSERT_IDS = frozenset(map(id, _ASSERT_TARGETS))


def is_metadata_assert(node: fx.Node) -> bool:
    """True for users that only assert metadata (they never count as escapes)."""
    return node.op == "call_function" and id(node.target) in _ASSERT_IDS


class _Tracer:
    """Keeps the deepest failure seen while matching one candidate."""

    __slots__ = ("depth", "failure")

    def __init__(self) -> None:
        self.depth = -1
        self.failure: Failure | None = None

    def note(self, depth: int, failure: Failure) -> None:
        if depth > self.depth:  # the first failure at the deepest level
            self.depth, self.failure = depth, failure


VISITS = [0]  # pattern-node visits by every match so far (complexity tests read it)


class Keys(tuple):
    """Trail entries' keys set in one step (generated code records a resolution's tags
    with one ``dict.update`` and one trail entry): undone together."""

    __slots__ = ()


class _State:
    __slots__ = (
        "binds",
        "tags",
        "dims",
        "nodes",
        "node_set",
        "chains",
        "trail",
        "tracer",
        "fast",
        "norm",
        "visits",
        "done",
    )

    def __init__(self, tracer: _Tracer | None, norm: dict | None = None) -> None:
        self.binds: dict[str, Any] = {}
        self.tags: dict[str, str] = {}
        self.dims: dict[str, Any] = {}
        self.chains: dict[str, tuple[fx.Node, ...]] = {}
        self.nodes: list[fx.Node] = []
        self.node_set: set[fx.Node] = set()
        self.trail: list[tuple[dict | None, Any]] = []
        self.tracer = tracer
        # Fast paths (see "fast paths" below) only when nobody records failures.
        self.fast = tracer is None
        # node -> normalize(node), shared by the candidates of one sweep (None: no cache)
        self.norm = norm
        self.visits = 0  # pattern nodes visited (added to VISITS when the match ends)
        self.done: dict[tuple, bool] = {}  # (shared call, node) pairs matched so far

    def undo(self, mark: int) -> None:
        trail = self.trail
        while len(trail) > mark:
            table, key = trail.pop()
            if table is None:
                self.node_set.discard(self.nodes.pop())
            elif key.__class__ is Keys:
                for one in key:
                    del table[one]
            else:
                del table[key]

    def put(self, table: dict, key: str, value: Any) -> None:
        table[key] = value
        self.trail.append((table, key))

    def add_node(self, node: fx.Node) -> None:
        if node not in self.node_set:
            self.nodes.append(node)
            self.node_set.add(node)
            self.trail.append((None, None))

    def fail(self, kind: str, *info: Any) -> None:
        if self.tracer is not None:
            self.tracer.note(len(self.nodes), Failure(kind, info))


def _targets_of(pat: P.Call) -> tuple[frozenset, frozenset]:
    cached = _TARGET_CACHE.get(id(pat))
    if cached is None:
        exact = frozenset(t for t in pat.targets if not isinstance(t, torch._ops.OpOverloadPacket))
        packets = frozenset(t for t in pat.targets if isinstance(t, torch._ops.OpOverloadPacket))
        cached = _TARGET_CACHE[id(pat)] = (exact, packets, pat)
    return cached[0], cached[1]


_TARGET_CACHE: dict[int, tuple[frozenset, frozenset, P.Call]] = {}


def target_matches(pat: P.Call, target: Any) -> bool:
    # Targets compare by identity (OpOverload has no __eq__), so ids stand in for them
    # and spare OpOverload's Python-level __hash__ on every visit.
    exact, packets = _first_set(pat)  # type: ignore[misc]
    if id(target) in exact:
        return True
    return bool(packets) and id(getattr(target, "overloadpacket", None)) in packets


# --------------------------------------------------------------------------- fast paths
# Used only when no tracer is attached (apply, dry runs). They skip work whose outcome is
# known in advance (a branch or argument whose root op cannot be the node's target; a
# single-way argument checked before a multi-way one), so the matches found, and their
# order, are exactly those of the plain path. With a tracer (explain) every failure is
# still visited and noted.

_FirstSet = tuple[frozenset, frozenset] | None  # ids of exact targets / packets; None: any
_FIRST: dict[int, tuple[_FirstSet, P.Pattern]] = {}  # keyed by id; holds the pattern


def _first_set(pat: P.Pattern) -> _FirstSet:
    """Ids of the op targets a node must have for ``pat`` to match it (None: anything)."""
    hit = _FIRST.get(id(pat))
    if hit is not None:
        return hit[0]
    kind = type(pat)
    fs: _FirstSet
    if kind is P.Call:
        exact, packets = _targets_of(pat)  # type: ignore[arg-type]
        fs = (frozenset(map(id, exact)), frozenset(map(id, packets)))
    elif kind is P.Typed:
        fs = _first_set(pat.inner)  # type: ignore[attr-defined]
    elif kind is P.Alt or kind is P.Maybe:
        parts = (
            [b for _, b in pat.branches]  # type: ignore[attr-defined]
            if kind is P.Alt
            else [_probe(pat.targets), pat.inner]  # type: ignore[attr-defined]
        )
        sets = [_first_set(b) for b in parts]
        fs = (
            None
            if any(x is None for x in sets)
            else (
                frozenset().union(*(x[0] for x in sets)),  # type: ignore[index]
                frozenset().union(*(x[1] for x in sets)),  # type: ignore[index]
            )
        )
    else:
        fs = None
    _FIRST[id(pat)] = (fs, pat)
    return fs


def _ids_may(first: _FirstSet, value: Any) -> bool:
    if first is None:
        return True
    if not isinstance(value, fx.Node) or value.op != "call_function":
        return False
    t = value.target
    return id(t) in first[0] or (
        bool(first[1]) and id(getattr(t, "overloadpacket", None)) in first[1]
    )


def _one_way(pat: P.Pattern, calls: bool = True) -> bool:
    """A pattern that matches a given value in at most one way: no alt, maybe or
    commutative call inside. ``calls=False``: nor any call (a leaf that never walks into
    the graph, matched inline by the fast path)."""
    kind = type(pat)
    if kind is P.Literal or kind is P.Wildcard or kind is P.Capture:
        return True
    if kind is P.Typed:
        return _one_way(pat.inner, calls)  # type: ignore[attr-defined]
    if kind is P.ListOf:
        return all(_one_way(p, calls) for p in pat.items)  # type: ignore[attr-defined]
    if kind is P.Call and calls:
        return not pat.commutative and all(  # type: ignore[attr-defined]
            _one_way(p)
            for p in pat.args + tuple(v for _, v in pat.kwargs)  # type: ignore[attr-defined]
        )
    return False


def _simple(pat: P.Pattern) -> bool:
    """A pattern that matches in at most one way and never walks into the graph."""
    return _one_way(pat, calls=False)


def _type_ok(pat: P.Typed, value: Any, st: _State) -> bool:
    val = _val(value)
    if not isinstance(val, torch.Tensor):
        st.fail("no_meta", value)
        return False
    if pat.dtype is not None and val.dtype not in pat.dtype:
        st.fail("dtype", value, val.dtype, pat.dtype)
        return False
    if pat.device is not None and val.device.type != pat.device:
        st.fail("device", value, val.device.type, pat.device)
        return False
    rank = pat.rank if pat.rank is not None else (len(pat.shape) if pat.shape else None)
    if rank is not None and val.dim() != rank:
        st.fail("rank", value, val.dim(), rank)
        return False
    for name, size in zip(pat.shape or (), val.shape):
        if name == "*":
            continue
        if isinstance(name, int):
            if not same_size(name, size):
                st.fail("size", value, size, name, None)
                return False
        elif name in st.dims:
            if not same_size(st.dims[name], size):
                st.fail("size", value, size, name, st.dims[name])
                return False
        else:
            st.put(st.dims, name, size)
    return True


@cache
def _probe(targets: tuple) -> P.Call:
    return P.Call(targets)


def _bind(st: _State, name: str, value: Any, where: tuple | None) -> bool:
    if name in st.binds:
        old = st.binds[name]
        same = (
            old is value if isinstance(old, fx.Node) or isinstance(value, fx.Node) else old == value
        )
        if not same:
            st.fail("rebind", name, old, value)
        return same
    st.put(st.binds, name, value)
    return True


def _val(value: Any) -> Any:
    return value.meta.get("val") if isinstance(value, fx.Node) else None


def exact_literal(lit: Any) -> bool:
    """Whether ``_literal_equal(lit, got, where)`` is ``got.__class__ is type(lit) and
    got == lit`` (a dtype, a string, None): numbers compare across kinds, lists across
    list types, and both may be dims."""
    return not isinstance(lit, (int, float, list, tuple))


def _literal_equal(want: Any, got: Any, where: tuple | None) -> bool:
    if isinstance(got, fx.Node):
        return False
    if type(want) is not type(got) and not (
        isinstance(want, (int, float)) and isinstance(got, (int, float))
    ):
        if not (isinstance(want, (list, tuple)) and isinstance(got, (list, tuple))):
            return False
    if want == got or (isinstance(want, (list, tuple)) and list(want) == list(got)):
        return True
    if where is not None:
        node, i = where
        spec = arg_spec(node.target)
        if spec is not None and i in spec.dim_args:
            # test-suite fix: the shared rank rule (kwarg first argument, tensor lists)
            rank = first_tensor_rank(node)
            w = canonical_dim(want, rank)
            return w == got or (isinstance(w, (list, tuple)) and list(w) == list(got))
    return False
