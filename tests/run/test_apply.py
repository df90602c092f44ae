"""``graphfuse.apply`` hands back a new program of the input's kind (an exported program, or
a GraphModule with its own parameters) and never touches the input, also when nothing
fires; a dry run hands back the input itself; anything else is refused with one line."""

from __future__ import annotations

import pytest
import torch
from torch.export import ExportedProgram

import graphfuse
from graphfuse import Rule
from graphfuse import dsl as P
from tests._models import Silu, check_rewrite, export, graph_code, randn, targets

from ._workloads import RELU_NEG, X, check_graph, fingerprint, rs, three_sites, to_abs

aten = torch.ops.aten
SILU = P.op(aten.mul, X, P.op(aten.sigmoid, X), commutative=True)


def _silu():
    return Rule("aten_silu", SILU, lambda m, b: b.call(aten.silu.default, m["x"]))


def _inputs(seed):
    return (randn(3, 8, seed=seed),)


@pytest.fixture(scope="module")
def silu_ep():
    return export(Silu(), (torch.randn(3, 8),))


def test_graph_module_input(silu_ep):
    gm = silu_ep.module()
    res = check_rewrite(gm, rs(_silu()), _inputs, {"aten_silu": 1})
    assert isinstance(res.program, torch.fx.GraphModule) and res.program is not gm
    assert not isinstance(res.program, ExportedProgram)
    assert aten.silu.default in targets(res.program)
    assert aten.silu.default not in targets(gm)
    dry = graphfuse.apply(gm, rs(_silu()), dry_run=True)
    assert dry.program is gm and dry.report.counts == {"aten_silu": 1}


@pytest.mark.parametrize("decompose", [False, True])
def test_nothing_fires_a_new_program_all_the_same(decompose):
    ep = export(three_sites, (torch.randn(3, 4),), decompose=decompose)
    before = fingerprint(ep)
    res = graphfuse.apply(ep, rs(Rule("never", P.op(aten.cos, X), to_abs)))
    assert fingerprint(ep) == before
    assert res.program is not ep and res.program.graph is not ep.graph
    assert res.report.total == 0 and res.report.iterations == 1
    assert graph_code(res.program) == graph_code(ep)
    check_graph(res.program.graph)


@pytest.mark.parametrize("decompose", [False, True])
def test_the_input_is_never_touched(decompose):
    """Rewrites at two sites, an escape at the third (pre-dispatch: metadata asserts too)."""
    ep = export(three_sites, (torch.randn(3, 4),), decompose=decompose)
    before = fingerprint(ep)
    res = graphfuse.apply(ep, rs(Rule("abs", RELU_NEG, to_abs)))
    assert res.report.counts == {"abs": 2}
    assert fingerprint(ep) == before
    ep.graph.lint()
    check_graph(res.program.graph)
    res.program.validate()


def test_not_a_program(silu_ep):
    with pytest.raises(graphfuse.GraphfuseError, match="not Linear"):
        graphfuse.apply(torch.nn.Linear(2, 2), rs(_silu()))
    with pytest.raises(graphfuse.GraphfuseError, match="not Graph$"):
        graphfuse.apply(silu_ep.graph, rs(_silu()))
