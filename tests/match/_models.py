"""Shared builders for the match tests: small exported programs, hand-built fake graphs, a
test-only multi-output op, and probe rules whose matches and near misses the tests read."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, fx
from torch.export import Dim, ExportedProgram

import graphfuse
from graphfuse.match import match_rule

aten = torch.ops.aten
Program = ExportedProgram | fx.GraphModule

# --------------------------------------------------------------------------- test-only op
# A custom op with two outputs, in a namespace of its own (tests/core registers gftest::).

if not hasattr(torch.ops, "gfmatch") or not hasattr(torch.ops.gfmatch, "minmax"):

    @torch.library.custom_op("gfmatch::minmax", mutates_args=())
    def _minmax(x: Tensor) -> tuple[Tensor, Tensor]:
        return x.amin(-1), x.amax(-1)

    @_minmax.register_fake
    def _minmax_fake(x: Tensor) -> tuple[Tensor, Tensor]:
        shape = x.shape[:-1]
        return x.new_empty(shape), x.new_empty(shape)


gfmatch = torch.ops.gfmatch


# --------------------------------------------------------------------------- small modules


class Silu(torch.nn.Module):
    """``x * sigmoid(x)`` (the operands in the order given)."""

    def __init__(self, swap: bool = False) -> None:
        super().__init__()
        self.swap = swap

    def forward(self, x: Tensor) -> Tensor:
        return torch.sigmoid(x) * x if self.swap else x * torch.sigmoid(x)


def fake_input_graph(
    *shape: int, dtype: torch.dtype = torch.float32
) -> tuple[fx.Graph, fx.Node, torch.Tensor]:
    """(an empty graph with a placeholder ``x``, ``x``, its fake value of ``shape``)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        val = torch.empty(*shape, dtype=dtype)
    g = fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = val
    return g, x, val


def Fn(fn: Callable[..., Any]) -> torch.nn.Module:  # noqa: N802  (reads like a class)
    """Wraps a function of the inputs as a module whose ``forward`` has the function's
    parameter names (so placeholders are named after them)."""

    def forward(self: torch.nn.Module, *args: Tensor) -> Any:
        return fn(*args)

    sig = inspect.signature(fn)
    me = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    forward.__signature__ = sig.replace(parameters=[me, *sig.parameters.values()])  # type: ignore[attr-defined]
    return type("Fn", (torch.nn.Module,), {"forward": forward})()


def export(
    mod: torch.nn.Module | Callable[..., Any],
    args: tuple,
    *,
    dynamic_shapes: Any = None,
    decompose: bool = False,
) -> ExportedProgram:
    """``torch.export.export`` (pre-dispatch), optionally followed by run_decompositions()."""
    if not isinstance(mod, torch.nn.Module):
        mod = Fn(mod)
    ep = torch.export.export(mod, args, dynamic_shapes=dynamic_shapes)
    return ep.run_decompositions() if decompose else ep


def dims(*names: str) -> list[Dim]:
    return [Dim(n, min=2, max=64) for n in names]


def graph_module(program: Program) -> fx.GraphModule:
    return program.graph_module if isinstance(program, ExportedProgram) else program


# --------------------------------------------------------------------------- probe rules


def rules(*rs: graphfuse.Rule, name: str = "test") -> graphfuse.RuleSet:
    return graphfuse.RuleSet(name, rs)


def _unused_rewrite(m: graphfuse.Match, b: graphfuse.Builder) -> Any:
    raise AssertionError("probe rules never rewrite")


def probe(pattern: Any, check: Any = None, name: str = "probe") -> graphfuse.Rule:
    """A rule that only matches (for matcher tests that read the bindings)."""
    return graphfuse.Rule(name, pattern, rewrite=_unused_rewrite, check=check)


def candidates(
    rule_set: graphfuse.RuleSet, graph: fx.Graph
) -> list[tuple[graphfuse.Rule, fx.Node]]:
    """Every (rule, node) where a rule's first pattern may be rooted, found through the rule
    set's index of root targets, each pair once, in graph order."""
    pairs = {
        (rule, node): None
        for target, by_target in rule_set.roots()
        for node in graph.find_nodes(op="call_function", target=target)
        for rule in by_target
    }
    return sorted(pairs, key=lambda rn: rn[1]._sort_key)


def matches(program: Program, pattern: Any, check: Any = None) -> list[graphfuse.Match]:
    """Every match of ``pattern`` (whose escape check and ``check`` pass), in graph order."""
    rs = rules(probe(pattern, check))
    found = []
    for rule, node in candidates(rs, graph_module(program).graph):
        res = match_rule(rule, node)
        if isinstance(res, graphfuse.Match):
            found.append(res)
    return found


def misses(program: Program, pattern: Any, check: Any = None, min_depth: int = 1) -> list[str]:
    """``explain``'s near misses of ``pattern`` as the sentences users read."""
    report = graphfuse.explain(program, rules(probe(pattern, check)), min_depth=min_depth)
    return [str(nm) for nm in report.near_misses]
