"""``graph.lint()`` runs after every sweep that changed the graph (not after one that did
nothing, not in a dry run, not with ``lint=False``), so a rewrite that broke the graph
fails with fx's own error at the end of its sweep."""

from __future__ import annotations

import pytest
import torch
from torch import fx

import graphfuse
from graphfuse import Rule
from graphfuse import dsl as P
from graphfuse.io import copy_graph
from graphfuse.run import run_rules
from tests._models import export

from ._workloads import RELU_NEG, X, escape_to_removed, fingerprint, rs, to_abs

aten = torch.ops.aten


@pytest.fixture
def linted(monkeypatch):
    """``linted(graph)``: how many times ``Graph.lint`` ran on ``graph``."""
    seen: list[fx.Graph] = []
    real = fx.Graph.lint

    def lint(self: fx.Graph) -> None:
        seen.append(self)
        real(self)

    monkeypatch.setattr(fx.Graph, "lint", lint)
    return lambda graph: sum(g is graph for g in seen)


def _program():
    return export(escape_to_removed, (torch.randn(3, 4), torch.randn(3, 4)))


def _rules():
    # 3 sweeps: abs escapes and mul_y fires; abs fires on retry; nothing left to retry
    return rs(Rule("abs", RELU_NEG, to_abs), Rule("mul_y", P.op(aten.mul.Tensor, X, P._), to_abs))


def test_lint_runs_after_each_sweep_that_changed_the_graph(linted):
    graph = copy_graph(_program())
    report = run_rules(graph, _rules())
    assert report.iterations == 3 and report.total == 2
    assert linted(graph) == 2


@pytest.mark.parametrize("how", ["lint=False", "dry run", "nothing fires"])
def test_no_lint_where_nothing_changed_or_asked_not_to(linted, how):
    graph = copy_graph(_program())
    if how == "lint=False":
        assert run_rules(graph, _rules(), lint=False).total == 2
    elif how == "dry run":
        assert run_rules(graph, _rules(), dry_run=True).counts == {"abs": 0, "mul_y": 1}
    else:
        assert run_rules(graph, rs(Rule("cos", P.op(aten.cos, X), to_abs))).total == 0
    assert linted(graph) == 0


def _misplaced(m, b):
    """A broken rewrite: it moves its new node in front of the graph's first node, before
    the input it reads."""
    new = b.call(aten.abs.default, m["x"])
    next(iter(new.graph.nodes)).prepend(new)
    return new


def test_a_rewrite_that_broke_the_graph_fails_at_the_sweeps_lint():
    ep = _program()
    before = fingerprint(ep)
    rules = rs(Rule("bad", P.op(aten.mul.Tensor, X, P._), _misplaced))
    with pytest.raises(RuntimeError, match="used before it has been defined"):
        graphfuse.apply(ep, rules)
    assert fingerprint(ep) == before
    with pytest.raises(RuntimeError, match="used before it has been defined"):
        run_rules(copy_graph(ep), rules)
    # unchecked, the run goes on: the broken graph is the caller's to find
    graph = copy_graph(ep)
    assert run_rules(graph, rules, lint=False).counts == {"bad": 1}
    with pytest.raises(RuntimeError, match="used before it has been defined"):
        graph.lint()
