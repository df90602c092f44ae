"""Programs in memory: the graph to rewrite (a copy; the input is never touched), and the
rewritten graph made a program again (graph signature, generated code)."""

from __future__ import annotations

import copy
from typing import Any

from torch import fx
from torch.export import ExportedProgram
from torch.export.graph_signature import TensorArgument

from ..errors import GraphfuseError

Program = ExportedProgram | fx.GraphModule


def graph_module_of(program: Any) -> fx.GraphModule:
    """The graph module of an ExportedProgram or GraphModule (raises for anything else)."""
    if isinstance(program, ExportedProgram):
        return program.graph_module
    if isinstance(program, fx.GraphModule):
        return program
    raise GraphfuseError(
        f"graphfuse works on torch.export.ExportedProgram or torch.fx.GraphModule, "
        f"not {type(program).__name__}"
    )


def copy_graph(program: Program) -> fx.Graph:
    """A copy of ``program``'s graph, nodes and names as they are (node meta copied
    shallowly: fake values are shared, never mutated). It has no owning module: it
    becomes a program again in :func:`finish_program`, which generates its code once."""
    src = graph_module_of(program).graph
    graph = fx.Graph(tracer_cls=src._tracer_cls)
    val_map: dict[fx.Node, fx.Node] = {}
    value, old_out = graph.graph_copy(src, val_map, return_output_node=True)
    graph.output(value).meta = copy.copy(old_out.meta)
    # graph_copy renames nodes named like Python builtins (export's ``input``); an
    # ExportedProgram's graph signature refers to the original names
    for old, new in val_map.items():
        if new.name != old.name:
            new.name = old.name
    graph._codegen = copy.deepcopy(src._codegen)
    return graph


def finish_program(original: Program, graph: fx.Graph) -> Program:
    """``graph`` as a program of ``original``'s kind: a GraphModule sharing the original's
    parameters and submodules (its code generated), wrapped like ``original`` (an
    ExportedProgram gets a graph signature whose output names follow the new outputs)."""
    gm = graph_module_of(original)
    new = fx.GraphModule(gm, graph, class_name=type(gm).__name__)
    new.meta = copy.copy(getattr(gm, "meta", {}))
    if not isinstance(original, ExportedProgram):
        return new
    sig = copy.deepcopy(original.graph_signature)
    out_node = graph.output_node()
    outs = out_node.args[0] if out_node.args else ()
    outs = outs if isinstance(outs, (list, tuple)) else (outs,)
    for spec, node in zip(sig.output_specs, outs):
        if isinstance(spec.arg, TensorArgument) and isinstance(node, fx.Node):
            spec.arg = TensorArgument(name=node.name)
    return original._update(new, sig)
