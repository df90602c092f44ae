"""Plain-data views of an exported program for ``graphfuse inspect`` (no rendering here)."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import torch
from torch import fx

FUSED_NAMESPACE = "graphfuse"


def target_name(node: fx.Node) -> str:
    """``aten.linear.default``-style name of what a node calls."""
    if node.op != "call_function":
        return node.op
    t = node.target
    if isinstance(t, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return str(t)
    if isinstance(t, torch._ops.HigherOrderOperator):
        return f"higher_order.{t.name()}"
    module = getattr(t, "__module__", "") or ""
    module = {"_operator": "operator"}.get(module, module)
    return f"{module}.{getattr(t, '__name__', repr(t))}".lstrip(".")


def is_fused(name: str) -> bool:
    """True for graphfuse:: ops (the ones rewrites create)."""
    return name.startswith(FUSED_NAMESPACE + ".")


def _dim(d: Any) -> int | str:
    return d if isinstance(d, int) else str(d)


def value_info(val: Any) -> dict[str, Any]:
    """Shape and dtype of a node's ``meta['val']`` (tensors), or its type."""
    if isinstance(val, torch.Tensor):
        return {
            "shape": [_dim(d) for d in val.shape],
            "dtype": str(val.dtype).replace("torch.", ""),
        }
    if isinstance(val, (list, tuple)):
        return {"items": [value_info(v) for v in val]}
    if val is None:
        return {}
    return {"type": type(val).__name__, "value": str(val)}


def _nbytes(val: Any) -> int:
    if isinstance(val, torch.Tensor) and all(isinstance(d, int) for d in val.shape):
        return val.numel() * val.element_size()
    return 0


def op_histogram(gm: fx.GraphModule) -> dict[str, int]:
    """Calls per target over the graph (and nested graphs), most frequent first."""
    counts: Counter[str] = Counter()
    for module in gm.modules():
        graph = getattr(module, "graph", None)
        if isinstance(graph, fx.Graph):
            counts.update(target_name(n) for n in graph.nodes if n.op == "call_function")
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def summary(ep: torch.export.ExportedProgram) -> dict[str, Any]:
    """Inputs, outputs, weights and the op histogram of a program."""
    nodes = {n.name: n for n in ep.graph.nodes}
    inputs, weights = [], {"parameters": 0, "buffers": 0, "constants": 0, "bytes": 0}
    for spec in ep.graph_signature.input_specs:
        name = getattr(spec.arg, "name", "")
        val = nodes[name].meta.get("val") if name in nodes else None
        kind = spec.kind.name
        if kind == "USER_INPUT":
            inputs.append({"name": name, **value_info(val)})
            continue
        key = {"PARAMETER": "parameters", "BUFFER": "buffers"}.get(kind, "constants")
        weights[key] += 1
        weights["bytes"] += _nbytes(val)
    out_node = next(n for n in ep.graph.nodes if n.op == "output")
    out_vals = out_node.args[0] if isinstance(out_node.args[0], (list, tuple)) else ()
    outputs = []
    for spec, arg in zip(ep.graph_signature.output_specs, out_vals):
        if spec.kind.name != "USER_OUTPUT":
            continue
        val = arg.meta.get("val") if isinstance(arg, fx.Node) else arg
        outputs.append({"name": getattr(spec.arg, "name", str(arg)), **value_info(val)})
    histogram = op_histogram(ep.graph_module)
    return {
        "inputs": inputs,
        "outputs": outputs,
        "weights": weights,
        "nodes": len(ep.graph.nodes),
        "ops": histogram,
        "fused_ops": {k: v for k, v in histogram.items() if is_fused(k)},
    }


def source_line(node: fx.Node) -> str:
    """The innermost ``File ..., line N`` frame of a node's stack trace, with its code."""
    lines = [ln.strip() for ln in (node.meta.get("stack_trace") or "").splitlines() if ln.strip()]
    frames = [i for i, ln in enumerate(lines) if ln.startswith("File ")]
    if not frames:
        return ""
    i = frames[-1]
    code = lines[i + 1] if i + 1 < len(lines) and not lines[i + 1].startswith("File ") else ""
    frame = relative_frame(lines[i])
    return f"{frame}: {code}" if code else frame


def relative_frame(frame: str) -> str:
    """A ``File "PATH", line N`` frame with PATH relative to the current folder when inside
    it (what a user in that folder would type)."""
    if not frame.startswith('File "'):
        return frame
    path, rest = frame[len('File "') :].split('"', 1)
    cwd = os.getcwd()
    if os.path.isabs(path) and path.startswith(cwd + os.sep):
        path = os.path.relpath(path, cwd)
    return f'File "{path}"{rest}'


def _node_row(node: fx.Node) -> dict[str, Any]:
    return {
        "name": node.name,
        "op": target_name(node),
        **value_info(node.meta.get("val")),
        "code": code_line(node),
    }


def neighbourhood(ep: torch.export.ExportedProgram, name: str) -> dict[str, Any] | None:
    """A node, the nodes it reads and the nodes that read it; None if there is no such node."""
    node = next((n for n in ep.graph.nodes if n.name == name), None)
    if node is None:
        return None
    return {
        "node": _node_row(node),
        "code": code_line(node),
        "arguments": arguments(node),
        "source": source_line(node),
        "inputs": [_node_row(n) for n in node.all_input_nodes],
        "users": [_node_row(n) for n in node.users],
    }


def _short_type(val: Any) -> str:
    """``f32[8, 64]`` for a tensor value, ``(f32[8], i64[8])`` for several, else ''."""
    if isinstance(val, torch.Tensor):
        from torch.fx.graph import dtype_abbrs

        dtype = dtype_abbrs.get(val.dtype, str(val.dtype).replace("torch.", ""))
        return f"{dtype}[{', '.join(str(d) for d in val.shape)}]"
    if isinstance(val, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in val):
        return "(" + ", ".join(_short_type(v) or "?" for v in val) + ")"
    if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return type(val).__name__
    return ""


def spell(value: Any) -> str:
    """An argument as graph code writes it: a node by name, a literal by its repr (floats
    in full: a pattern's literal must equal it exactly)."""
    if isinstance(value, fx.Node):
        return value.name
    if isinstance(value, list):
        return "[" + ", ".join(spell(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(spell(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {spell(v)}" for k, v in value.items()) + "}"
    if isinstance(value, torch.device):
        return repr(str(value))
    return repr(value)


def code_line(node: fx.Node) -> str:
    """One node as a line of graph code: ``name: type = target(args, key=value)``, the
    target spelled as a pattern names it (``aten.clamp.default``)."""
    typ = _short_type(node.meta.get("val"))
    head = f"{node.name}: {typ}" if typ else node.name
    if node.op == "placeholder":
        return f"{head} = input"
    if node.op == "output":
        return f"return {spell(node.args[0])}"
    if node.op == "get_attr":
        return f"{head} = self.{node.target}"
    args = [spell(a) for a in node.args] + [f"{k}={spell(v)}" for k, v in node.kwargs.items()]
    return f"{head} = {target_name(node)}({', '.join(args)})"


def graph_code(ep: torch.export.ExportedProgram) -> list[str]:
    """The program's graph, one line per node, in graph order (``inspect --graph``)."""
    return [code_line(n) for n in ep.graph.nodes]


def arguments(node: fx.Node) -> list[dict[str, str]]:
    """A call's arguments by schema name: the value as written (node name or literal), or
    the default when the call leaves it out, and the value a pattern is compared with
    when normalisation changes it (a negative dim made non-negative)."""
    from ..match.args import arg_spec, normalize

    if node.op != "call_function":
        return []
    spec = arg_spec(node.target)
    if spec is None:
        return [{"name": f"#{i}", "value": spell(a), "how": ""} for i, a in enumerate(node.args)]
    normal = normalize(node)
    rows = []
    for i, name in enumerate(spec.names):
        if i < len(node.args):
            given, how = node.args[i], ""
        elif name in node.kwargs:
            given, how = node.kwargs[name], "keyword"
        else:
            given, how = normal[i], "default"
        if how != "default" and not isinstance(given, fx.Node) and normal[i] != given:
            how = (how + "; " if how else "") + f"matched as {spell(normal[i])}"
        rows.append({"name": name, "value": spell(given), "how": how})
    return rows


def close_names(ep: torch.export.ExportedProgram, name: str, limit: int = 5) -> list[str]:
    """Node names similar to ``name`` (for 'no such node' messages)."""
    import difflib

    return difflib.get_close_matches(name, [n.name for n in ep.graph.nodes], n=limit)


def diff(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """What changed between two summaries: ops that disappeared / appeared (by count)."""
    ops_a, ops_b = a["ops"], b["ops"]
    gone = {k: ops_a[k] - ops_b.get(k, 0) for k in ops_a if ops_a[k] > ops_b.get(k, 0)}
    new = {k: ops_b[k] - ops_a.get(k, 0) for k in ops_b if ops_b[k] > ops_a.get(k, 0)}

    def order(d: dict[str, int]) -> dict[str, int]:
        return dict(sorted(d.items(), key=lambda kv: (-kv[1], kv[0])))

    return {
        "nodes": [a["nodes"], b["nodes"]],
        "disappeared": order(gone),
        "appeared": order(new),
        "fused_appeared": order({k: v for k, v in new.items() if is_fused(k)}),
    }
