"""``traced_rule``: a node the pattern reads twice must be one node in the graph too; the
rule is located where ``traced_rule`` was called."""

from __future__ import annotations

import inspect

import torch

import graphfuse
from graphfuse import RuleSet
from graphfuse.run import run_rules


def _square_of_tanh(x: torch.Tensor) -> torch.Tensor:
    a = torch.tanh(x)
    return a * a


class _Same(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _square_of_tanh(x) + 1


class _TwoTanh(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * torch.tanh(x) + 1  # two tanh nodes, equal in structure


def _tanh_squared(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x).square()


def _rules() -> RuleSet:
    rule = graphfuse.traced_rule("sq", _square_of_tanh, _tanh_squared, [torch.randn(4)])
    return RuleSet("t", [rule])


def test_a_node_used_twice_by_one_op_binds_one_node() -> None:
    same = torch.export.export(_Same(), (torch.randn(4),))
    two = torch.export.export(_TwoTanh(), (torch.randn(4),))
    assert len(two.graph.find_nodes(op="call_function", target=torch.ops.aten.tanh.default)) == 2
    assert run_rules(same.graph_module.graph, _rules(), dry_run=True).counts["sq"] == 1
    # a * a must not match tanh(x) * tanh(x) computed twice: the pattern reads one node
    assert run_rules(two.graph_module.graph, _rules(), dry_run=True).counts["sq"] == 0


def test_rewritten_square_matches_the_program() -> None:
    ep = torch.export.export(_Same(), (torch.randn(4),))
    res = graphfuse.apply(ep, _rules())
    assert res.report.counts["sq"] == 1
    x = torch.randn(4)
    torch.testing.assert_close(res.program.module()(x), ep.module()(x))


def test_the_rule_is_located_where_traced_rule_was_called() -> None:
    args = ("sq", _square_of_tanh, _tanh_squared, [torch.randn(4)])
    rule, line = graphfuse.traced_rule(*args), inspect.currentframe().f_lineno
    assert rule.where == f"{__file__}:{line}"
    assert not rule.local
