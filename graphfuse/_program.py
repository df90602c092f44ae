"""Programs in memory: copy an ExportedProgram / GraphModule, and make a rewritten graph
a valid program again (graph signature, recompile)."""

from __future__ import annotations

import copy
from typing import Any

from torch import fx
from torch.export import ExportedProgram
from torch.export.graph_signature import TensorArgument

from ._errors import GraphfuseError
from ._fxedit import _SETATTR, FAST, _bucket, _buckets, _map_arg, create_name

Program = ExportedProgram | fx.GraphModule
_NOTHING: frozenset = frozenset()


def copy_graph_module(
    gm: fx.GraphModule,
    *,
    recompile: bool = True,
    skip: set[fx.Node] | None = None,
    bare: set[fx.Node] | None = None,
    val_map: dict[fx.Node, fx.Node] | None = None,
) -> fx.GraphModule:
    """A new GraphModule with a copied graph (node meta copied shallowly: fake values are
    shared, never mutated) that shares the original's parameters and submodules.

    Args:
        recompile: generate the copy's Python code now. ``False`` skips it (a full code
            generation, as costly as the final one) for a copy that is rewritten and then
            recompiled by :func:`finish_program`; until then only its graph may be used.
        skip: nodes not to copy (no copied node may use one; their names stay taken, as
            if they had been copied and erased).
        bare: nodes copied without their arguments (stand-ins for nodes to be replaced).
        val_map: filled with original node -> copy.
    """
    graph = fx.Graph(owning_module=None, tracer_cls=gm.graph._tracer_cls)
    val_map = {} if val_map is None else val_map
    out = _graph_copy(graph, gm.graph, val_map, skip, bare)
    if out is not None:
        value, old_out = out
        graph.output(value).meta = copy.copy(old_out.meta)
    # graph_copy renames nodes whose names are Python builtins (export's ``input``); keep
    # the original names, which an ExportedProgram's graph signature refers to.
    for old_node, new_node in val_map.items():
        if new_node.name != old_node.name:
            new_node.name = old_node.name
    graph._codegen = copy.deepcopy(gm.graph._codegen)
    if recompile:
        new = fx.GraphModule(gm, graph, class_name=type(gm).__name__)
    else:
        # GraphModule.__new__ makes a class of the instance's own; silence its recompile
        # while __init__ copies the attributes the graph refers to.
        new = fx.GraphModule.__new__(fx.GraphModule, gm, graph)
        own = type(new)
        own.recompile = lambda self: None  # type: ignore[method-assign]
        try:
            new.__init__(gm, graph, class_name=type(gm).__name__)  # type: ignore[misc]
        finally:
            del own.recompile
    new.meta = copy.copy(getattr(gm, "meta", {}))
    return new


def _graph_copy(
    graph: fx.Graph,
    src: fx.Graph,
    val_map: dict[fx.Node, fx.Node],
    skip: set | None = None,
    bare: set | None = None,
) -> Any:
    """``graph.graph_copy(src, val_map, return_output_node=True)``, about twice as fast.

    ``Graph.create_node`` scans every new node's arguments for raw SymInts (torch >= 2.13),
    which is half the cost of a copy; nodes copied from a valid graph cannot hold any, so
    this builds them as ``create_node`` does, without the scan. Falls back to fx's copy on
    a torch whose Graph lacks the internals it uses (not with ``skip`` / ``bare``).
    """
    if not FAST:
        if skip or bare:
            raise GraphfuseError("copying a graph without some of its nodes needs fx internals")
        return graph.graph_copy(src, val_map, return_output_node=True)
    skip, bare = skip or _NOTHING, bare or _NOTHING
    namespace = graph._graph_namespace
    lookup = val_map.__getitem__
    buckets = _buckets(graph)  # side-table buckets fetched once per (op, target)
    for node in src.nodes:
        op, target = node.op, node.target
        if op == "output":
            return _map_arg(node.args[0], lookup), node
        name = create_name(namespace, node.name)
        if node in skip:
            continue
        if node in bare:
            new = fx.Node(graph, name, op, target, (), {}, node.type)
        else:
            new = fx.Node(
                graph, name, op, target, _map_arg(node.args, lookup),
                _map_arg(node.kwargs, lookup), node.type,
            )  # fmt: skip
        # Node.__setattr__ re-files a node in the side table on every write: write first
        meta = node.meta
        _SETATTR(new, "meta", meta.copy() if type(meta) is dict else copy.copy(meta))
        namespace.associate_name_with_obj(name, new)
        graph._insert(new)
        _bucket(buckets, graph, new)[new] = None
        graph._len += 1
        val_map[node] = new
    return None


def copy_program(
    program: Program,
    *,
    skip: set[fx.Node] | None = None,
    bare: set[fx.Node] | None = None,
    val_map: dict | None = None,
) -> tuple[Program, fx.GraphModule]:
    """(a copy of ``program``, its graph module to rewrite in place). The graph module is
    not recompiled: :func:`finish_program` does that once after rewriting. ``skip``,
    ``bare`` and ``val_map``: as for :func:`copy_graph_module`."""
    if isinstance(program, ExportedProgram):
        gm = copy_graph_module(
            program.graph_module, recompile=False, skip=skip, bare=bare, val_map=val_map
        )
        return program, gm
    if isinstance(program, fx.GraphModule):
        gm = copy_graph_module(program, recompile=False, skip=skip, bare=bare, val_map=val_map)
        return gm, gm
    raise GraphfuseError(
        f"graphfuse works on torch.export.ExportedProgram or torch.fx.GraphModule, "
        f"not {type(program).__name__}"
    )


class _Unfiled:
    """A graph's find-nodes table that answers "not filed" to ``node in table`` and
    forwards everything else to the table."""

    __slots__ = ("table",)

    def __init__(self, table: Any) -> None:
        self.table = table

    def __contains__(self, node: object) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.table, name)


def recompile(gm: fx.GraphModule) -> None:
    """``gm.recompile()`` without fx re-filing every node in the graph's find-nodes table
    twice: code generation sets each node's ``_repr_fn`` and then restores it, and
    ``Node.__setattr__`` re-files a node that ``in`` says is filed on every write (7% of
    the recompile; the table's keys, op and target, do not change). For a graph only the
    caller holds (``apply``'s copy)."""
    graph = gm.graph
    table = graph.__dict__.get("_find_nodes_lookup_table")
    if not FAST or table is None:
        gm.recompile()
        return
    graph._find_nodes_lookup_table = _Unfiled(table)
    try:
        gm.recompile()
    finally:
        graph._find_nodes_lookup_table = table


def finish_program(original: Program, gm: fx.GraphModule) -> Program:
    """Recompile ``gm`` and wrap it like ``original`` (an ExportedProgram gets a graph
    signature whose output names follow the rewritten output node)."""
    recompile(gm)
    if not isinstance(original, ExportedProgram):
        return gm
    sig = copy.deepcopy(original.graph_signature)
    out_node = gm.graph.output_node()
    outs = out_node.args[0] if out_node.args else ()
    outs = outs if isinstance(outs, (list, tuple)) else (outs,)
    for spec, node in zip(sig.output_specs, outs):
        if isinstance(spec.arg, TensorArgument) and isinstance(node, fx.Node):
            spec.arg = TensorArgument(name=node.name)
    return original._update(gm, sig)


def graph_module_of(program: Any) -> fx.GraphModule:
    if isinstance(program, ExportedProgram):
        return program.graph_module
    if isinstance(program, fx.GraphModule):
        return program
    raise GraphfuseError(
        f"graphfuse works on torch.export.ExportedProgram or torch.fx.GraphModule, "
        f"not {type(program).__name__}"
    )
