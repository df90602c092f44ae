"""Creating and erasing ``fx.Node``s as ``Graph.create_node`` / ``Graph.erase_node`` do,
without their per-call overhead.

``create_node`` scans every new node's arguments with pytree for raw SymInts (torch >= 2.13,
only to warn) and ``erase_node`` re-checks what the rewriter has already proven and sets
``_erased`` through ``Node.__setattr__`` (which looks the node up in the graph's side table
on every attribute write). These do the same edits — namespace, node list, side table,
length, users — and fall back to fx whenever a graph has something they do not handle
(node hooks on the owning module, a torch without these internals, an argument that is not
a plain value). Names come from ``_Namespace.create_name``'s own steps with the regex work
cached per target (checked against fx at import); ``replace_uses`` and ``inserting_before``
are ``replace_all_uses_with`` and ``Graph.inserting_before`` without their Python wrappers.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx
from torch.fx import graph as _fx_graph
from torch.fx.immutable_collections import immutable_dict

_INTERNALS = ("_graph_namespace", "_insert", "_find_nodes_lookup_table", "_len")
# the fx internals these edits (and graphfuse._program's fast copy) use
FAST = (
    all(hasattr(fx.Graph(), a) for a in _INTERNALS)
    and hasattr(fx.Graph()._find_nodes_lookup_table, "table")
    and hasattr(fx.Graph()._find_nodes_lookup_table, "__dict__")
    and hasattr(fx.Node, "_remove_from_list")
)

# Argument types that cannot hold a raw SymInt (create_node's scan would find nothing).
_PLAIN = frozenset((fx.Node, int, float, bool, str, type(None), torch.dtype, torch.device))
_SETATTR = object.__setattr__
_map_arg = getattr(torch._C, "_fx_map_arg", fx.map_arg)


def _plain(args: Any) -> bool:
    if _PLAIN.issuperset(map(type, args)):
        return True
    for a in args:
        t = type(a)
        if t in _PLAIN:
            continue
        if (t is list or t is tuple) and all(type(x) in _PLAIN for x in a):
            continue
        return False
    return True


# fx.Graph's ``owning_module`` property returns this field (read directly: a rewrite
# checks for hooks on every edit)
_OWNER_FIELD = "_owning_module" in vars(fx.Graph())
_GRAPH = fx.Graph


def _hooked(graph: fx.Graph, name: str) -> bool:
    owner = graph._owning_module if _OWNER_FIELD and type(graph) is _GRAPH else graph.owning_module
    return owner is not None and bool(getattr(owner, name, None))


# Per graph side table: (op, id(target)) -> (target, the table's bucket of that key), and
# under None the call buckets by id(target) alone (see _call_buckets). A bucket is created
# once per key and never replaced, so it can be fetched once instead of hashing the target
# (``OpOverload.__hash__`` runs Python code) on every insert / remove. Kept on the table
# itself: a global map would hold every graph alive (its buckets hold the nodes).
_BUCKETS_ATTR = "_graphfuse_buckets"
_TARGET_TO_STR = fx.Graph._target_to_str


def _buckets(graph: fx.Graph) -> dict:
    attrs = graph._find_nodes_lookup_table.__dict__
    got = attrs.get(_BUCKETS_ATTR)
    if got is None:
        got = attrs[_BUCKETS_ATTR] = {}
    return got


def _call_buckets(buckets: dict) -> dict:
    """``buckets``' part for calls, by the target's id alone: id(target) -> (target, bucket)."""
    got = buckets.get(None)
    if got is None:
        got = buckets[None] = {}
    return got


def _call_bucket(calls: dict, buckets: dict, graph: fx.Graph, node: fx.Node) -> dict:
    """``_bucket`` of a call node, through ``calls`` (``_call_buckets(buckets)``)."""
    target = node.target
    hit = calls.get(id(target))
    if hit is None or hit[0] is not target:
        hit = calls[id(target)] = (target, _bucket(buckets, graph, node))
    return hit[1]


def _bucket(buckets: dict, graph: fx.Graph, node: fx.Node) -> dict:
    """The side-table bucket ``node`` is filed in (``table.table[table._key(node)]``)."""
    op, target = node.op, node.target
    if op != "call_function":
        target = None
    hit = buckets.get((op, id(target)))
    if hit is None or hit[0] is not target:
        table = graph._find_nodes_lookup_table
        hit = buckets[(op, id(target))] = (target, table.table[table._key(node)])
    return hit[1]


# The regex work of ``_Namespace.create_name`` is a pure function of the candidate, and
# ``Graph._target_to_str`` one of the target: both cached.
_NAME_RE = getattr(_fx_graph, "_name_regex", None)
_ILLEGAL_CHARS = getattr(_fx_graph, "_illegal_char_regex", None)
_ILLEGAL_NAMES = getattr(_fx_graph, "_illegal_names", None)
Parsed = tuple[str, str, "str | None", bool]  # legal candidate, base, numeric suffix, illegal
_NAMES: dict[int, tuple[Any, Parsed]] = {}  # id(target) -> (target, its parsed name)


def _parse_name(candidate: str) -> Parsed:
    """``candidate`` made a legal name, split as ``create_name`` splits it, and whether it
    is a keyword or builtin (which ``create_name`` never gives unnumbered)."""
    if candidate.isascii() and candidate.isidentifier():
        # what fx's regex finds, without its lazy quantifier's backtracking (≈ 2 µs for a
        # name like convert_element_type_123): the shortest base whose rest is "_<digits>"
        i = candidate.rfind("_")
        tail = candidate[i + 1 :]
        illegal = _ILLEGAL_NAMES.get(candidate) is not None  # type: ignore[union-attr]
        if i > 0 and tail.isdigit():
            return candidate, candidate[:i], tail, illegal
        return candidate, candidate, None, illegal
    match = _NAME_RE.match(candidate)  # type: ignore[union-attr]
    if match is None:
        candidate = _ILLEGAL_CHARS.sub("_", candidate) or "_unnamed"  # type: ignore[union-attr]
        if candidate[0].isdigit():
            candidate = f"_{candidate}"
        match = _NAME_RE.match(candidate)  # type: ignore[union-attr]
        if match is None:
            raise AssertionError(f"Name regex failed to match candidate: {candidate}")
    base, num = match.group(1, 2)
    return candidate, base, num, _ILLEGAL_NAMES.get(candidate) is not None  # type: ignore[union-attr]


def _create_name(namespace: Any, parsed: Parsed) -> str:
    """``namespace.create_name(candidate, None)``, given the candidate's parse."""
    candidate, base, num_s, illegal = parsed
    used = namespace._used_names
    if num_s is None or candidate in used:
        num = namespace._base_count.get(base, 0)
        if illegal:
            num += 1
            candidate = f"{base}_{num}"
    else:
        num = int(num_s)
    while candidate in used:
        num += 1
        candidate = f"{base}_{num}"
    used.add(candidate)
    namespace._base_count[base] = num
    return candidate


def _names_agree() -> bool:
    """Whether :func:`_create_name` gives the names this torch's ``create_name`` gives."""
    if _NAME_RE is None or _ILLEGAL_CHARS is None or _ILLEGAL_NAMES is None:
        return False
    probes = ["mul", "mul", "mul_1", "add_3", "add", "add_3", "x.y", "3d", "", "list", "if"]
    probes += ["attention_fp8.default", "getitem", "getitem", "a__b_02", "mul_1", "mul", "if"]
    try:
        ours, theirs = _fx_graph._Namespace(), _fx_graph._Namespace()
        for name in probes:
            if _create_name(ours, _parse_name(name)) != theirs.create_name(name, None):
                return False
        return ours._used_names == theirs._used_names and ours._base_count == theirs._base_count
    except Exception:
        return False


_FAST_NAMES = FAST and _names_agree()


def create_name(namespace: Any, candidate: str) -> str:
    """``namespace.create_name(candidate, None)`` (fx's ``_Namespace``): the same name and
    namespace state, faster (see :func:`_parse_name`)."""
    if not _FAST_NAMES:
        return namespace.create_name(candidate, None)
    return _create_name(namespace, _parse_name(candidate))


def _new_name(graph: fx.Graph, target: Any) -> str:
    """The name ``create_node`` gives a call of ``target``."""
    namespace = graph._graph_namespace
    if not _FAST_NAMES or type(graph)._target_to_str is not _TARGET_TO_STR:
        return namespace.create_name(graph._target_to_str(target), None)
    hit = _NAMES.get(id(target))
    if hit is None or hit[0] is not target:
        hit = _NAMES[id(target)] = (target, _parse_name(graph._target_to_str(target)))
    return _create_name(namespace, hit[1])


def create_call(
    graph: fx.Graph, target: Any, args: tuple, kwargs: dict, *, plain: bool = False
) -> fx.Node:
    """``graph.create_node("call_function", target, args, kwargs)`` at the insert point.
    ``plain``: the caller has checked that ``args`` are nodes and ``_PLAIN`` scalars and
    ``kwargs`` is empty (what ``_plain`` would find)."""
    if (
        not FAST
        or not (plain or _plain(args))
        or (kwargs and not _plain(kwargs.values()))
        or _hooked(graph, "_create_node_hooks")
    ):
        return graph.create_node("call_function", target, args, kwargs)
    name = _new_name(graph, target)
    node = fx.Node(graph, name, "call_function", target, args, kwargs or immutable_dict(), None)
    graph._graph_namespace.associate_name_with_obj(name, node)
    graph._insert(node)
    buckets = _buckets(graph)
    _call_bucket(_call_buckets(buckets), buckets, graph, node)[node] = None
    graph._len += 1
    return node


class _InsertBefore:
    """``graph.inserting_before(node)`` (a node given) without building its closure."""

    __slots__ = ("graph", "saved")

    def __init__(self, graph: fx.Graph, node: fx.Node) -> None:
        self.graph = graph
        self.saved = graph._insert
        graph._insert = node.prepend

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        self.graph._insert = self.saved


_INSERTING_BEFORE = fx.Graph.inserting_before


def inserting_before(graph: fx.Graph, node: fx.Node) -> Any:
    """``graph.inserting_before(node)`` for a node of ``graph``."""
    if not FAST or type(graph).inserting_before is not _INSERTING_BEFORE or node.graph is not graph:
        return graph.inserting_before(node)  # (fx's own error for a node of another graph)
    return _InsertBefore(graph, node)


_REPLACE_INPUT = hasattr(fx.Node, "_replace_input_with")


def replace_uses(graph: fx.Graph, old: fx.Node, new: fx.Node) -> None:
    """``old.replace_all_uses_with(new)`` for a node ``old`` of ``graph``."""
    users = old.users
    if not users:
        return
    if not _REPLACE_INPUT or old.graph is not graph or _hooked(graph, "_replace_hooks"):
        old.replace_all_uses_with(new)
        return
    for user in [*users]:
        user._replace_input_with(old, new)


def _none(_: fx.Node) -> None:
    return None


def erase(graph: fx.Graph, nodes: list[fx.Node], *, unused_only: bool = False) -> list[fx.Node]:
    """``graph.erase_node(n)`` for each of ``nodes`` in order (each a live node of ``graph``
    whose users are erased before it); ``unused_only``: skip a node that still has users
    when its turn comes. Returns the nodes skipped."""
    skipped: list[fx.Node] = []
    if not FAST or _hooked(graph, "_erase_node_hooks"):
        for node in nodes:
            if unused_only and node.users:
                skipped.append(node)
            else:
                graph.erase_node(node)
        return skipped
    buckets = _buckets(graph)
    calls = _call_buckets(buckets)
    setattr_, none, map_arg = _SETATTR, _none, _map_arg
    erased = 0  # graph._len is lowered once, at the end
    try:
        for node in nodes:
            if node.users:
                if unused_only:
                    skipped.append(node)
                    continue
                graph.erase_node(node)  # raises as fx does
            if node._erased or node.graph is not graph:
                graph.erase_node(node)  # raises or warns as fx does
                continue
            if node.op == "call_function":
                del _call_bucket(calls, buckets, graph, node)[node]
            else:
                del _bucket(buckets, graph, node)[node]
            node._remove_from_list()
            setattr_(node, "_erased", True)
            erased += 1
            kwargs = node._kwargs
            node._update_args_kwargs(
                map_arg(node._args, none), map_arg(kwargs, none) if kwargs else kwargs
            )
    finally:
        graph._len -= erased
    return skipped


_LEGAL_OPS = getattr(_fx_graph, "_legal_ops", None)
_LINT = fx.Graph.lint


def lint(graph: fx.Graph) -> None:
    """``graph.lint()``: the same checks (each node's op, owner and side-table entry, its
    arguments defined before it, unique names; with an owning module, the targets), without
    fx's per-argument message formatting and target hashing. When a check fails, fx's
    ``lint`` runs to raise its own error."""
    if not FAST or _LEGAL_OPS is None or type(graph).lint is not _LINT or not _lint_ok(graph):
        graph.lint()


def _lint_ok(graph: fx.Graph) -> bool:
    """True when ``graph.lint()`` would pass (False: it may not)."""
    legal, buckets = _LEGAL_OPS, _buckets(graph)
    calls = _call_buckets(buckets)
    owner = graph.owning_module
    seen: set[fx.Node] = set()  # (each of graph: checked before it is added)
    names: set[str] = set()
    callables: set[int] = set()  # ids of targets found callable (held by the graph's nodes)
    for node in graph.nodes:
        op, target = node.op, node.target
        if op == "call_function":
            bucket = _call_bucket(calls, buckets, graph, node)
            if owner and id(target) not in callables:
                if not callable(target):
                    return False
                callables.add(id(target))
        elif op not in legal or (owner and not _attr_ok(owner, op, target)):  # type: ignore[operator]
            return False
        else:
            bucket = _bucket(buckets, graph, node)
        if node.graph is not graph or node not in bucket:
            return False
        if not seen.issuperset(node._input_nodes):
            return False
        seen.add(node)
        name = node.name
        if name in names:
            return False
        names.add(name)
    return True


def _attr_ok(owner: Any, op: str, target: Any) -> bool:
    """The target check of ``lint`` for a node that is not a call_function."""
    if not isinstance(target, str):
        return False
    if op == "get_attr" or op == "call_module":
        obj = owner
        for atom in target.split("."):
            obj = getattr(obj, atom, None)
            if obj is None or (op == "call_module" and not isinstance(obj, torch.nn.Module)):
                return False
    return True
