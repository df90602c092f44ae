"""The two graph edits a rewrite makes: add a call node, erase matched nodes.

Both do what ``Graph.create_node`` / ``Graph.erase_node`` do, with less per node: no scan
of the arguments for raw SymInts (a rewrite's arguments are nodes and literals read from
the graph), one pass over a whole set of doomed nodes. They keep fx's invariants: the node
list, the graph's length, the name table, the op index behind ``find_nodes``, every
node's ``users``.

They reach into fx's own bookkeeping (``Graph._insert``, ``Graph._find_nodes_lookup_table``,
``Graph._graph_namespace``, ``Node._remove_from_list``, ``Node._input_nodes``), checked
once at import. Where that
differs (another torch), where the owning module has node hooks, or with
``GRAPHFUSE_FX_EDITS=api`` in the environment, they call fx's public methods instead:
the graph comes out the same (``tests/rewrite/test_edits.py`` checks both ways).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from torch import fx


def _has_internals() -> bool:
    g = fx.Graph()
    node = g.placeholder("x")
    table = getattr(g, "_find_nodes_lookup_table", None)
    namespace = getattr(g, "_graph_namespace", None)
    return (
        hasattr(g, "_insert")
        and hasattr(g, "_len")
        and hasattr(g, "_target_to_str")
        and isinstance(getattr(table, "table", None), dict)
        and hasattr(table, "insert")
        and hasattr(namespace, "create_name")
        and hasattr(namespace, "associate_name_with_obj")
        and hasattr(fx.Node, "_remove_from_list")
        and isinstance(getattr(node, "_input_nodes", None), dict)
    )


DIRECT = os.environ.get("GRAPHFUSE_FX_EDITS", "direct") != "api" and _has_internals()


def _direct(graph: fx.Graph) -> bool:
    """Whether edits of ``graph`` may bypass fx's public methods (no node hooks)."""
    if not DIRECT:
        return False
    gm = graph.owning_module
    return gm is None or not (
        getattr(gm, "_create_node_hooks", None) or getattr(gm, "_erase_node_hooks", None)
    )


_BASE_NAMES: dict[int, tuple[Any, str]] = {}  # id(target) -> (target, its node names' base)


def add_call(graph: fx.Graph, target: Any, args: tuple, kwargs: dict) -> fx.Node:
    """A ``call_function`` node of ``target`` at the graph's insert point, as
    ``graph.call_function(target, args, kwargs)`` makes it."""
    if not _direct(graph):
        return graph.call_function(target, args, kwargs)
    hit = _BASE_NAMES.get(id(target))
    if hit is None or hit[0] is not target:
        hit = _BASE_NAMES[id(target)] = (target, graph._target_to_str(target))
    name = graph._graph_namespace.create_name(hit[1], None)
    node = fx.Node(graph, name, "call_function", target, args, kwargs)
    graph._graph_namespace.associate_name_with_obj(name, node)
    graph._insert(node)
    graph._find_nodes_lookup_table.insert(node)
    graph._len += 1
    return node


def erase(graph: fx.Graph, nodes: Iterable[fx.Node]) -> None:
    """Erase ``nodes``, given users first (each node's users must be erased before it:
    in a topologically ordered graph, latest first), as ``graph.erase_node`` does, but
    an erased node keeps its arguments (fx sets each to None): it is only taken off its
    inputs' users, which allocates nothing."""
    if not _direct(graph):
        for node in nodes:
            graph.erase_node(node)
        return
    table = graph._find_nodes_lookup_table.table
    by_target: dict[int, dict] = {}  # id(target) -> its call nodes in the op index
    setattr_ = object.__setattr__
    erased = 0
    for node in nodes:
        if node.users or node.graph is not graph or node._erased:
            graph.erase_node(node)  # fx's own error (or warning)
            continue
        if node.op == "call_function":
            t = node.target
            bucket = by_target.get(id(t))
            if bucket is None:
                bucket = by_target[id(t)] = table[("call_function", t)]
            bucket.pop(node)
        else:
            table[(node.op, None)].pop(node)
        node._remove_from_list()
        setattr_(node, "_erased", True)
        for inp in node._input_nodes:  # off its inputs' users (its own arguments stay)
            del inp.users[node]
        erased += 1
    graph._len -= erased
