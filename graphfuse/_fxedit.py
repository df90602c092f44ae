"""Creating and erasing ``fx.Node``s as ``Graph.create_node`` / ``Graph.erase_node`` do,
without their per-call overhead.

``create_node`` scans every new node's arguments with pytree for raw SymInts (torch >= 2.13,
only to warn) and ``erase_node`` re-checks what the rewriter has already proven and sets
``_erased`` through ``Node.__setattr__`` (which looks the node up in the graph's side table
on every attribute write). These do the same edits — namespace, node list, side table,
length, users — and fall back to fx whenever a graph has something they do not handle
(node hooks on the owning module, a torch without these internals, an argument that is not
a plain value).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch import fx
from torch.fx.immutable_collections import immutable_dict

_INTERNALS = ("_graph_namespace", "_insert", "_find_nodes_lookup_table", "_len")
# the fx internals these edits (and graphfuse._program's fast copy) use
FAST = (
    all(hasattr(fx.Graph(), a) for a in _INTERNALS)
    and hasattr(fx.Graph()._find_nodes_lookup_table, "table")
    and hasattr(fx.Node, "_remove_from_list")
)

# Argument types that cannot hold a raw SymInt (create_node's scan would find nothing).
_PLAIN = frozenset((fx.Node, int, float, bool, str, type(None), torch.dtype, torch.device))
_SETATTR = object.__setattr__
_map_arg = getattr(torch._C, "_fx_map_arg", fx.map_arg)


def _plain(args: Any) -> bool:
    for a in args:
        t = type(a)
        if t in _PLAIN:
            continue
        if (t is list or t is tuple) and all(type(x) in _PLAIN for x in a):
            continue
        return False
    return True


def _hooked(graph: fx.Graph, name: str) -> bool:
    owner = graph.owning_module
    return owner is not None and bool(getattr(owner, name, None))


# Per graph side table: (op, id(target)) -> (target, the table's bucket of that key). A
# bucket is created once per key and never replaced, so it can be fetched once instead of
# hashing the target (``OpOverload.__hash__`` runs Python code) on every insert / remove.
_BUCKETS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_NAMES: dict[int, tuple[Any, str]] = {}  # id(target) -> (target, Graph._target_to_str)
_TARGET_TO_STR = fx.Graph._target_to_str


def _buckets(graph: fx.Graph) -> dict:
    table = graph._find_nodes_lookup_table
    got = _BUCKETS.get(table)
    if got is None:
        got = _BUCKETS[table] = {}
    return got


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


def _base_name(graph: fx.Graph, target: Any) -> str:
    """``graph._target_to_str(target)`` (a pure function of the target), cached."""
    if type(graph)._target_to_str is not _TARGET_TO_STR:
        return graph._target_to_str(target)
    hit = _NAMES.get(id(target))
    if hit is None or hit[0] is not target:
        hit = _NAMES[id(target)] = (target, graph._target_to_str(target))
    return hit[1]


def create_call(graph: fx.Graph, target: Any, args: tuple, kwargs: dict) -> fx.Node:
    """``graph.create_node("call_function", target, args, kwargs)`` at the insert point."""
    if (
        not FAST
        or not _plain(args)
        or not _plain(kwargs.values())
        or _hooked(graph, "_create_node_hooks")
    ):
        return graph.create_node("call_function", target, args, kwargs)
    namespace = graph._graph_namespace
    name = namespace.create_name(_base_name(graph, target), None)
    node = fx.Node(graph, name, "call_function", target, args, kwargs or immutable_dict(), None)
    namespace.associate_name_with_obj(name, node)
    graph._insert(node)
    _bucket(_buckets(graph), graph, node)[node] = None
    graph._len += 1
    return node


def _none(_: fx.Node) -> None:
    return None


def erase(graph: fx.Graph, nodes: list[fx.Node], *, unused_only: bool = False) -> None:
    """``graph.erase_node(n)`` for each of ``nodes`` in order (each a live node of ``graph``
    whose users are erased before it); ``unused_only``: skip a node that still has users
    when its turn comes."""
    if not FAST or _hooked(graph, "_erase_node_hooks"):
        for node in nodes:
            if not (unused_only and node.users):
                graph.erase_node(node)
        return
    buckets = _buckets(graph)
    get = buckets.get
    setattr_, none = _SETATTR, _none
    for node in nodes:
        if node.users and unused_only:
            continue
        if node.users or node._erased or node.graph is not graph:
            graph.erase_node(node)  # raises or warns as fx does
            continue
        op, target = node.op, node.target
        hit = get((op, id(target))) if op == "call_function" else None
        if hit is None or hit[0] is not target:
            del _bucket(buckets, graph, node)[node]
        else:
            del hit[1][node]
        node._remove_from_list()
        setattr_(node, "_erased", True)
        graph._len -= 1
        node._update_args_kwargs(_map_arg(node._args, none), _map_arg(node._kwargs, none))
