"""Shared builders for the core tests: small modules, export helpers, test-only custom ops,
and the checks every rewrite test makes (numerics, lint, input untouched, signature)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, fx
from torch.export import Dim, ExportedProgram

import graphfuse

aten = torch.ops.aten
Program = ExportedProgram | fx.GraphModule

# --------------------------------------------------------------------------- test-only ops
# Rewrite targets defined here (the graphfuse:: quant ops are owned elsewhere). A fresh
# process that loads a .pt2 using them imports this module first.

if not hasattr(torch.ops, "gftest") or not hasattr(torch.ops.gftest, "silu"):

    @torch.library.custom_op("gftest::silu", mutates_args=())
    def _silu(x: Tensor) -> Tensor:
        return x * torch.sigmoid(x)

    @_silu.register_fake
    def _silu_fake(x: Tensor) -> Tensor:
        return torch.empty_like(x)

    @torch.library.custom_op("gftest::minmax", mutates_args=())
    def _minmax(x: Tensor) -> tuple[Tensor, Tensor]:
        return x.amin(-1), x.amax(-1)

    @_minmax.register_fake
    def _minmax_fake(x: Tensor) -> tuple[Tensor, Tensor]:
        shape = x.shape[:-1]
        return x.new_empty(shape), x.new_empty(shape)

    @torch.library.custom_op("gftest::max_last", mutates_args=())
    def _max_last(x: Tensor) -> tuple[Tensor, Tensor]:
        v, i = torch.max(x, -1)
        return v, i

    @_max_last.register_fake
    def _max_last_fake(x: Tensor) -> tuple[Tensor, Tensor]:
        shape = x.shape[:-1]
        return x.new_empty(shape), x.new_empty(shape, dtype=torch.int64)


gftest = torch.ops.gftest


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


class SiluChain(torch.nn.Module):
    """``n`` blocks of ``x = silu-spelled(x) + 1`` (for the complexity guard)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def forward(self, x: Tensor) -> Tensor:
        for _ in range(self.n):
            x = x * torch.sigmoid(x) + 1.0
        return x


# --------------------------------------------------------------------------- export helpers


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


def randn(*shape: int, seed: int, dtype: torch.dtype = torch.float32) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def graph_module(program: Program) -> fx.GraphModule:
    return program.graph_module if isinstance(program, ExportedProgram) else program


def graph_code(program: Program) -> str:
    """The generated Python code of the program's graph (for before/after comparisons)."""
    return graph_module(program).graph.python_code(root_module="self").src


def targets(program: Program) -> list[Any]:
    return [n.target for n in graph_module(program).graph.nodes if n.op == "call_function"]


def call(program: Program, inputs: Sequence[Tensor]) -> Any:
    if isinstance(program, ExportedProgram):
        return program.module()(*inputs)
    return program(*inputs)


def check_signature(ep: ExportedProgram) -> None:
    """The graph signature names exactly the graph's placeholders and outputs."""
    ep.validate()
    gm = ep.graph_module
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    assert [s.arg.name for s in ep.graph_signature.input_specs] == placeholders
    outs = gm.graph.output_node().args[0]
    out_names = [o.name for o in outs if isinstance(o, fx.Node)]
    spec_names = [s.arg.name for s in ep.graph_signature.output_specs if hasattr(s.arg, "name")]
    assert spec_names == out_names


def check_rewrite(
    program: Program,
    rules: graphfuse.RuleSet,
    make_inputs: Callable[[int], Sequence[Tensor]],
    expect: dict[str, int],
    *,
    seeds: Sequence[int] = (1, 2),
) -> graphfuse.Result:
    """Apply ``rules`` and make every check a rewrite test owes: counts, the input untouched,
    ``graph.lint()``, a valid signature, and outputs equal to the unrewritten program's on
    fresh random inputs."""
    before = graph_code(program)
    result = graphfuse.apply(program, rules)
    assert graph_code(program) == before, "apply mutated its input"
    for name, n in expect.items():
        assert result.report.counts[name] == n, result.report
    kind = ExportedProgram if isinstance(program, ExportedProgram) else fx.GraphModule
    assert isinstance(result.program, kind)
    graph_module(result.program).graph.lint()
    if isinstance(result.program, ExportedProgram):
        check_signature(result.program)
    for seed in seeds:
        inputs = make_inputs(seed)
        torch.testing.assert_close(call(result.program, inputs), call(program, inputs))
    return result


def rules(*rs: graphfuse.Rule, name: str = "test") -> graphfuse.RuleSet:
    return graphfuse.RuleSet(name, rs)


def _unused_rewrite(m: graphfuse.Match, b: graphfuse.Builder) -> Any:
    raise AssertionError("probe rules never rewrite")


def probe(pattern: Any, check: Any = None, name: str = "probe") -> graphfuse.Rule:
    """A rule that only matches (for matcher tests that read the bindings)."""
    return graphfuse.Rule(name, pattern, rewrite=_unused_rewrite, check=check)


def matches(program: Program, pattern: Any, check: Any = None) -> list[graphfuse.Match]:
    """Every match of ``pattern`` (whose escape check and ``check`` pass), in graph order."""
    from graphfuse.match import match_rule
    from graphfuse.run import sweep_order

    rs = rules(probe(pattern, check))
    found = []
    for rule, node in sweep_order(rs, graph_module(program).graph):  # (one rule: graph order)
        res = match_rule(rule, node)
        if isinstance(res, graphfuse.Match):
            found.append(res)
    return found


def misses(program: Program, pattern: Any, check: Any = None, min_depth: int = 1) -> list[str]:
    """``explain``'s near misses of ``pattern`` as the sentences users read."""
    report = graphfuse.explain(program, rules(probe(pattern, check)), min_depth=min_depth)
    return [str(nm) for nm in report.near_misses]
