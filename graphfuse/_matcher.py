"""Matching patterns against an ``fx.Graph``: no tracing, backtracking over node arguments.

The engine is a set of generators, one per pattern kind, sharing one mutable
:class:`_State` with an undo trail: a generator yields each time its pattern matched
(having extended the state) and undoes its own changes before trying the next way or
giving up. Failures are reported to an optional tracer as cheap tuples; sentences are
only built when somebody asks (``explain``).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import TYPE_CHECKING, Any

import torch
from torch import fx

from . import dsl as P
from ._args import arg_index, arg_spec, canonical_dim, first_tensor_rank, normalize
from ._dims import same_size
from ._failure import Failure

if TYPE_CHECKING:
    pass

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


def is_metadata_assert(node: fx.Node) -> bool:
    """True for users that only assert metadata (they never count as escapes)."""
    return node.op == "call_function" and node.target in _ASSERT_TARGETS


class _Tracer:
    """Keeps the deepest failure seen while matching one candidate."""

    __slots__ = ("depth", "failure")

    def __init__(self) -> None:
        self.depth = -1
        self.failure: Failure | None = None

    def note(self, depth: int, failure: Failure) -> None:
        if depth > self.depth:  # the first failure at the deepest level
            self.depth, self.failure = depth, failure


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

    def undo(self, mark: int) -> None:
        trail = self.trail
        while len(trail) > mark:
            table, key = trail.pop()
            if table is None:
                self.node_set.discard(self.nodes.pop())
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


def _may_match(pat: P.Pattern, value: Any) -> bool:
    """False when ``pat`` certainly fails on ``value`` (its root op is not the target)."""
    fs = _first_set(pat)
    if fs is None:
        return True
    if not isinstance(value, fx.Node) or value.op != "call_function":
        return False
    t = value.target
    if id(t) in fs[0]:
        return True
    return bool(fs[1]) and id(getattr(t, "overloadpacket", None)) in fs[1]


_ALT_BRANCHES: dict[tuple[int, int], tuple[Any, tuple]] = {}


def _alt_branches(pat: P.Alt, value: Any) -> tuple:
    """The branches of ``pat`` that may match ``value``, cached per (pattern, target)."""
    _first_set(pat)  # keeps the pattern alive, so its id stays unique
    target = value.target if isinstance(value, fx.Node) and value.op == "call_function" else None
    key = (id(pat), id(target))
    hit = _ALT_BRANCHES.get(key)
    if hit is None or hit[0] is not target:
        kept = tuple((tag, b) for tag, b in pat.branches if _may_match(b, value))
        hit = _ALT_BRANCHES[key] = (target, kept)
    return hit[1]


def _simple(pat: P.Pattern) -> bool:
    """A pattern that matches in at most one way and never walks into the graph."""
    kind = type(pat)
    if kind is P.Literal or kind is P.Wildcard or kind is P.Capture:
        return True
    if kind is P.Typed:
        return _simple(pat.inner)  # type: ignore[attr-defined]
    if kind is P.ListOf:
        return all(_simple(p) for p in pat.items)  # type: ignore[attr-defined]
    return False


class _Plan:
    """How a :class:`P.Call` reads one target's arguments: (schema index, pattern) pairs in
    pattern order (``items``, ``swapped``) and single-way ones first (``fast_*``)."""

    __slots__ = ("target", "missing", "need", "items", "swapped", "fast_items", "fast_swapped")

    def __init__(self, pat: P.Call, target: Any) -> None:
        self.target = target
        self.missing: str | None = None
        items: list[tuple[int, P.Pattern]] = list(enumerate(pat.args))
        for key, sub in pat.kwargs:
            idx = arg_index(target, key)
            if idx is None:
                self.missing = key
                break
            items.append((idx, sub))
        self.need = max((i for i, _ in items), default=-1) + 1
        self.items = items
        self.swapped = (
            [(items[1][0], items[0][1]), (items[0][0], items[1][1])] + items[2:]
            if pat.commutative and self.missing is None
            else None
        )
        # stable sort: the multi-way arguments keep their order, so do the matches
        self.fast_items = sorted(items, key=lambda it: not _simple(it[1]))
        self.fast_swapped = (
            sorted(self.swapped, key=lambda it: not _simple(it[1])) if self.swapped else None
        )


_PLANS: dict[tuple[int, int], _Plan] = {}


def _plan(pat: P.Call, target: Any) -> _Plan:
    _first_set(pat)  # keeps the pattern alive, so its id stays unique
    key = (id(pat), id(target))
    plan = _PLANS.get(key)
    if plan is None or plan.target is not target:
        plan = _PLANS[key] = _Plan(pat, target)
    return plan


def _val(value: Any) -> Any:
    return value.meta.get("val") if isinstance(value, fx.Node) else None


def _m(pat: P.Pattern, value: Any, st: _State, where: tuple | None) -> Iterator[None]:
    kind = type(pat)
    if kind is P.Call:
        yield from _m_call(pat, value, st, where)
    elif kind is P.Capture:
        yield from _m_capture(pat, value, st, where)
    elif kind is P.Wildcard:
        yield
    elif kind is P.Literal:
        if _literal_equal(pat.value, value, where):
            yield
        else:
            st.fail("literal", where, value, pat.value)
    elif kind is P.Typed:
        yield from _m_typed(pat, value, st, where)
    elif kind is P.Alt:
        for tag, branch in _alt_branches(pat, value) if st.fast else pat.branches:
            mark = len(st.trail)
            if pat.name is not None:
                st.put(st.tags, pat.name, tag)
            yield from _m(branch, value, st, where)
            st.undo(mark)
    elif kind is P.Maybe:
        yield from _m_maybe(pat, value, st, where)
    elif kind is P.ListOf:
        yield from _m_list(pat, value, st, where)
    else:
        raise TypeError(f"not a pattern: {pat!r}")


def _m_call(pat: P.Call, value: Any, st: _State, where: tuple | None) -> Iterator[None]:
    if not isinstance(value, fx.Node) or value.op != "call_function":
        st.fail("not_call", where, value, pat)
        return
    if not target_matches(pat, value.target):
        st.fail("target", value, pat)
        return
    mark = len(st.trail)
    if pat.name is not None and not _bind(st, pat.name, value, where):
        return
    st.add_node(value)
    norm = st.norm
    if norm is None:
        args = normalize(value)
    else:
        args = norm.get(value)
        if args is None:
            args = norm[value] = normalize(value)
    plan = _plan(pat, value.target)
    if plan.missing is not None:
        st.fail("no_arg", value, plan.missing)
        st.undo(mark)
        return
    if plan.need > len(args):
        st.fail("arity", value, len(args), pat)
        st.undo(mark)
        return
    fast = st.fast
    yield from _m_args(plan.fast_items if fast else plan.items, 0, args, value, st)
    if plan.swapped is not None:
        yield from _m_args(plan.fast_swapped if fast else plan.swapped, 0, args, value, st)
    st.undo(mark)


def _m_args(items: list, k: int, args: list, node: fx.Node, st: _State) -> Iterator[None]:
    if k == len(items):
        yield
        return
    i, sub = items[k]
    if st.fast and not _may_match(sub, args[i]):
        return
    for _ in _m(sub, args[i], st, (node, i)):
        yield from _m_args(items, k + 1, args, node, st)


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


def _m_capture(pat: P.Capture, value: Any, st: _State, where: tuple | None) -> Iterator[None]:
    if pat.kind == "tensor":
        val = _val(value)
        if not isinstance(value, fx.Node) or (
            val is not None and not isinstance(val, torch.Tensor)
        ):
            st.fail("kind", pat.name, value, "a tensor", where)
            return
    elif pat.kind == "scalar":
        ok = isinstance(value, (int, float, bool)) or isinstance(
            _val(value), (torch.SymInt, torch.SymFloat, torch.SymBool)
        )
        if not ok:
            st.fail("kind", pat.name, value, "a scalar", where)
            return
    mark = len(st.trail)
    if _bind(st, pat.name, value, where):
        yield
    st.undo(mark)


def _m_typed(pat: P.Typed, value: Any, st: _State, where: tuple | None) -> Iterator[None]:
    for _ in _m(pat.inner, value, st, where):
        mark = len(st.trail)
        if _type_ok(pat, value, st):
            yield
        st.undo(mark)


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


def _m_maybe(pat: P.Maybe, value: Any, st: _State, where: tuple | None) -> Iterator[None]:
    chain: list[fx.Node] = []
    steps = [(value, ())]
    cur = value
    # test-suite fix: a fresh P.Call per visit filled _TARGET_CACHE (keyed by id, holding
    # the pattern) with one entry per visit; share one probe per target tuple instead.
    probe = _probe(pat.targets)
    while (
        isinstance(cur, fx.Node)
        and cur.op == "call_function"
        and target_matches(probe, cur.target)
        and cur.args
        and (pat.where is None or pat.where(cur))
    ):
        chain.append(cur)
        cur = cur.args[0]
        steps.append((cur, tuple(chain)))
    for inner_value, through in reversed(steps):  # longest chain first
        if st.fast and not _may_match(pat.inner, inner_value):
            continue
        mark = len(st.trail)
        for n in through:
            st.add_node(n)
        if pat.name is not None:
            st.put(st.chains, pat.name, through)
        yield from _m(pat.inner, inner_value, st, where if not through else (through[-1], 0))
        st.undo(mark)


def _m_list(pat: P.ListOf, value: Any, st: _State, where: tuple | None) -> Iterator[None]:
    if not isinstance(value, (list, tuple)) or len(value) != len(pat.items):
        st.fail("literal", where, value, pat)
        return
    yield from _m_items(pat.items, 0, value, st, where)


def _m_items(items: tuple, k: int, value: Any, st: _State, where: tuple | None) -> Iterator[None]:
    if k == len(items):
        yield
        return
    if st.fast and not _may_match(items[k], value[k]):
        return
    for _ in _m(items[k], value[k], st, where):
        yield from _m_items(items, k + 1, value, st, where)


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
