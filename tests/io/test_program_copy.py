"""The program copy a rewrite works on (``copy_graph``) and the program made from it again
(``finish_program``): the copy is fx's ``graph_copy`` with every node keeping its name
(also a placeholder named like a builtin, which the graph signature refers to), meta copied
shallowly, the op index filled, and independent of the source; the finished program is of
the original's kind, shares its parameters, runs as the source does, and an exported
program's signature follows replaced outputs."""

from __future__ import annotations

import pytest
import torch
from torch import fx
from torch.export import ExportedProgram

import graphfuse
from graphfuse import dsl as P
from graphfuse.io import copy_graph, finish_program, graph_module_of
from tests._models import check_signature

aten = torch.ops.aten


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("shift", torch.randn(4))

    def forward(self, x: torch.Tensor, input: torch.Tensor) -> tuple[torch.Tensor, ...]:  # noqa: A002
        a = torch.softmax(self.lin(x) @ input.transpose(-1, -2) * 0.5 + self.shift[0], dim=-1)
        b = a.clamp(min=-1.0, max=1.0).to(torch.bfloat16)
        return b, torch.cat([a, a], dim=0).sum(dim=(0, 1), keepdim=True)


@pytest.fixture(scope="module")
def ep() -> ExportedProgram:
    return torch.export.export(_Block(), (torch.randn(2, 3, 4), torch.randn(2, 3, 4)))


def _describe(graph: fx.Graph) -> list[tuple]:
    def arg(a: object) -> object:
        return fx.map_arg(a, lambda n: ("node", n.name))

    return [(n.name, n.op, n.target, arg(n.args), arg(n.kwargs), n.type) for n in graph.nodes]


def _inputs() -> list[torch.Tensor]:
    return [torch.randn(2, 3, 4), torch.randn(2, 3, 4)]


def test_the_copy_is_fx_graph_copy_with_the_names_kept(ep) -> None:
    src = ep.graph_module.graph
    copy = copy_graph(ep)
    ref = fx.Graph()
    ref_map: dict[fx.Node, fx.Node] = {}
    value = ref.graph_copy(src, ref_map)
    ref.output(value)
    assert "input_1" in [n.name for n in ref.nodes]  # fx renames the builtin's name ...
    for old, new in ref_map.items():  # ... the copy keeps the source's names
        new.name = old.name
    assert _describe(copy) == _describe(ref) == _describe(src)
    copy.lint()
    assert copy.owning_module is None
    for old, new, fx_new in zip(src.nodes, copy.nodes, ref.nodes):
        assert new is not old and new.graph is copy
        assert new.meta == old.meta and new.meta is not old.meta  # shallow copy
        assert new.meta.get("val") is old.meta.get("val")  # fake values shared
        assert {u.name for u in new.users} == {u.name for u in old.users}
        assert [u.name for u in new.users] == [u.name for u in fx_new.users]  # fx's order
    # the op index is filled: find_nodes sees the copied calls
    for target in {n.target for n in src.nodes if n.op == "call_function"}:
        want = [n.name for n in src.find_nodes(op="call_function", target=target)]
        got = [n.name for n in copy.find_nodes(op="call_function", target=target)]
        assert got == want
    for op in ("placeholder", "output"):
        assert [n.name for n in copy.find_nodes(op=op)] == [n.name for n in src.find_nodes(op=op)]


def test_the_copy_is_independent(ep) -> None:
    code = ep.graph_module.code
    n_src = len(ep.graph.nodes)
    copy = copy_graph(ep)
    (cat,) = copy.find_nodes(op="call_function", target=aten.cat.default)
    (total,) = cat.users
    out = copy.output_node()
    out.args = ((out.args[0][0], out.args[0][0]),)
    copy.erase_node(total)
    copy.erase_node(cat)
    assert len(ep.graph.nodes) == n_src and ep.graph_module.code == code
    ep.graph.lint()


@pytest.mark.parametrize("kind", ["program", "module"])
def test_the_finished_program_runs_as_the_source(ep, kind) -> None:
    src = ep if kind == "program" else ep.module()
    gm = graph_module_of(src)
    new = finish_program(src, copy_graph(src))
    assert isinstance(new, ExportedProgram if kind == "program" else fx.GraphModule)
    new_gm = graph_module_of(new)
    assert new_gm is not gm and new_gm.code == gm.code
    assert type(new_gm).__name__ == type(gm).__name__
    for kind_of in ("named_parameters", "named_buffers"):
        ours, theirs = dict(getattr(new_gm, kind_of)()), dict(getattr(gm, kind_of)())
        assert list(ours) == list(theirs) and all(ours[k] is theirs[k] for k in ours)
    if kind == "program":
        check_signature(new)
        assert repr(new.graph_signature) == repr(ep.graph_signature)
        assert new.state_dict.keys() == ep.state_dict.keys()
    xs = _inputs()
    run = (lambda p: p.module()(*xs)) if kind == "program" else (lambda p: p(*xs))
    for a, b in zip(run(new), run(src), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_the_signature_follows_a_replaced_output() -> None:
    """The root is an output of the program: the signature names its replacement."""

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return torch.relu(-x), x * 2

    ep = torch.export.export(M(), (torch.randn(3, 4),))
    assert [s.arg.name for s in ep.graph_signature.output_specs] == ["relu", "mul"]
    rule = graphfuse.Rule(
        "clamp",
        P.op(aten.relu, P.op(aten.neg, P.tensor("x"))),
        lambda m, b: b.call(aten.neg.default, b.call(aten.clamp_max.default, m["x"], 0)),
    )
    res = graphfuse.apply(ep, graphfuse.RuleSet("t", [rule]))
    assert res.report.counts == {"clamp": 1}
    check_signature(res.program)
    assert [s.arg.name for s in res.program.graph_signature.output_specs] == [
        "neg_default",
        "mul",
    ]
    assert [s.arg.name for s in ep.graph_signature.output_specs] == ["relu", "mul"]
    x = torch.randn(3, 4)
    for a, b in zip(res.program.module()(x), ep.module()(x), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
