"""Rules written as plain Python functions, traced once at registration.

``traced_rule`` exports the pattern function (pre-dispatch, and again after
``run_decompositions()``), turns each graph into the same :mod:`graphfuse.dsl` values a
hand-written rule uses, and traces the replacement function once into a template that
every rewrite instantiates with ``Builder.call`` — nothing is traced per match.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import fx

from .. import dsl as P
from ..fxnodes import is_metadata_assert
from .rule import Rule, caller_location, first_sentence


class _Wrap(torch.nn.Module):
    def __init__(self, fn: Callable) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


def _export(fn: Callable, example_inputs: Sequence[Any]) -> torch.export.ExportedProgram:
    return torch.export.export(_Wrap(fn), tuple(example_inputs), strict=False)


def _params(fn: Callable, n: int) -> list[str]:
    names = list(inspect.signature(fn).parameters)
    if len(names) != n:
        raise ValueError(f"{fn.__name__} takes {len(names)} arguments; {n} example inputs given")
    return names


def _literal(value: Any, ignore_literals: bool) -> P.Pattern:
    if ignore_literals and isinstance(value, (int, float)) and not isinstance(value, bool):
        return P._
    if (
        ignore_literals
        and isinstance(value, (list, tuple))
        and all(isinstance(v, int) for v in value)
    ):
        return P._
    return P.Literal(value)


def graph_to_patterns(
    graph: fx.Graph, names: list[str], *, ignore_literals: bool = False
) -> tuple[P.Pattern, ...]:
    """The pattern(s) a traced graph spells: placeholders become tensor captures named
    after ``names``; nodes used more than once get a name so both uses bind one node."""
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(names):
        raise ValueError("a pattern function may not use parameters, buffers or constants")
    env: dict[fx.Node, P.Pattern] = dict(zip(placeholders, (P.Capture(n, "tensor") for n in names)))

    def conv(a: Any) -> Any:
        if isinstance(a, fx.Node):
            return env[a]
        if isinstance(a, (list, tuple)) and any(isinstance(x, fx.Node) for x in a):
            return P.ListOf(tuple(conv(x) for x in a))
        return _literal(a, ignore_literals)

    uses: dict[fx.Node, int] = {}  # argument slots reading each node (``a * a``: two)

    def count(a: fx.Node) -> fx.Node:
        uses[a] = uses.get(a, 0) + 1
        return a

    for node in graph.nodes:
        if not is_metadata_assert(node):
            fx.map_arg((node.args, node.kwargs), count)
    for node in graph.nodes:
        if node.op in ("placeholder", "output") or is_metadata_assert(node):
            continue
        if node.op != "call_function":
            raise ValueError(f"a pattern function may not use {node.op} ({node.name})")
        env[node] = P.Call(
            (node.target,),
            tuple(conv(a) for a in node.args),
            tuple((k, conv(v)) for k, v in node.kwargs.items()),
            False,
            f"_{node.name}" if uses.get(node, 0) > 1 else None,
        )
    out = graph.output_node().args[0]
    outs = out if isinstance(out, (list, tuple)) else (out,)
    return tuple(env[o] for o in outs)


def _template_rewrite(gm: fx.GraphModule, names: list[str]) -> Callable:
    graph = gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(names):
        raise ValueError("a replacement function may not use parameters, buffers or constants")
    nodes = [n for n in graph.nodes if n.op == "call_function" and not is_metadata_assert(n)]
    out = graph.output_node().args[0]

    def rewrite(m: Any, b: Any) -> Any:
        env: dict[fx.Node, Any] = {p: m[name] for p, name in zip(placeholders, names)}
        for node in nodes:
            args = fx.map_arg(node.args, env.__getitem__)
            kwargs = fx.map_arg(node.kwargs, env.__getitem__)
            env[node] = b.call(node.target, *args, **kwargs)
        return fx.map_arg(out, env.__getitem__)

    return rewrite


def traced_rule(
    name: str,
    pattern: Callable[..., Any],
    replacement: Callable[..., Any],
    example_inputs: Sequence[Any],
    *,
    check: Callable | None = None,
    priority: int = 0,
    ignore_literals: bool = False,
    doc: str = "",
) -> Rule:
    """A :class:`Rule` from two plain functions, traced once here.

    The pattern is exported pre-dispatch and after ``run_decompositions()``; when the two
    graphs differ, the rule matches either (``m.tag("ir")`` is ``"pre_dispatch"`` or
    ``"core_aten"``). The replacement's arguments are looked up by name among the
    pattern function's parameters.

    Args:
        pattern: a function of tensors spelling the subgraph to find.
        replacement: a function of (some of) the same parameters computing the new value.
        example_inputs: tensors to trace with (shapes matter only for ops whose traced
            arguments depend on them; pass ``ignore_literals=True`` to match any size).

    Example::

        rule = graphfuse.traced_rule(
            "silu", lambda x: x * torch.sigmoid(x), lambda x: torch.nn.functional.silu(x),
            [torch.randn(8)])
    """
    names = _params(pattern, len(example_inputs))
    ep = _export(pattern, example_inputs)
    pre = graph_to_patterns(ep.graph, names, ignore_literals=ignore_literals)
    core = graph_to_patterns(ep.run_decompositions().graph, names, ignore_literals=ignore_literals)
    if repr(pre) == repr(core):
        pats = pre
    else:
        pats = tuple(
            P.Alt((("pre_dispatch", a), ("core_aten", c)), "ir") for a, c in zip(pre, core)
        )
    rep_names = list(inspect.signature(replacement).parameters)
    missing = [n for n in rep_names if n not in names]
    if missing:
        raise ValueError(f"replacement parameters {missing} are not parameters of the pattern")
    rep_inputs = [example_inputs[names.index(n)] for n in rep_names]
    rep_gm = _export(replacement, rep_inputs).graph_module
    return Rule(
        name,
        pats if len(pats) > 1 else pats[0],
        _template_rewrite(rep_gm, rep_names),
        check,
        priority,
        doc or first_sentence(pattern.__doc__),
        location=caller_location(2),
    )
