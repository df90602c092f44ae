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

from typing import Any

import torch
from torch import fx
from torch.fx.immutable_collections import immutable_dict

_INTERNALS = ("_graph_namespace", "_insert", "_find_nodes_lookup_table", "_len")
FAST = all(hasattr(fx.Graph(), a) for a in _INTERNALS) and hasattr(fx.Node, "_remove_from_list")

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
    name = namespace.create_name(graph._target_to_str(target), None)
    node = fx.Node(graph, name, "call_function", target, args, kwargs or immutable_dict(), None)
    namespace.associate_name_with_obj(name, node)
    graph._insert(node)
    graph._find_nodes_lookup_table.insert(node)
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
    remove = graph._find_nodes_lookup_table.remove
    for node in nodes:
        if unused_only and node.users:
            continue
        if node.users or node._erased or node.graph is not graph:
            graph.erase_node(node)  # raises or warns as fx does
            continue
        remove(node)
        node._remove_from_list()
        _SETATTR(node, "_erased", True)
        graph._len -= 1
        node._update_args_kwargs(_map_arg(node._args, _none), _map_arg(node._kwargs, _none))
