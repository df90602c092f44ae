"""Sweeps until nothing more fires: a rewrite that creates an op some pattern names brings
a full sweep after it; otherwise the next sweep retries only the candidates that an
escaping intermediate blocked; rules that undo each other end in ``FixpointError`` with the
input untouched; a second ``apply`` on the result changes nothing."""

from __future__ import annotations

import pytest
import torch

import graphfuse
from graphfuse import Rule
from graphfuse import dsl as P
from graphfuse.io import copy_graph
from graphfuse.run import run_rules
from tests._models import Silu, check_rewrite, export, graph_code, randn

from ._workloads import (
    RELU_NEG,
    X,
    check_graph,
    escape_to_removed,
    fingerprint,
    relu_then_exp,
    rs,
    to_abs,
    to_neg,
)

aten = torch.ops.aten


def _apply(fn, rules, n_in=1):
    """``apply`` with the progress calls recorded: one ``(0, n)`` ... ``(n, n)`` run per sweep."""
    ep = export(fn, tuple(torch.randn(3, 4) for _ in range(n_in)))
    before = fingerprint(ep)
    calls: list[tuple[int, int]] = []
    res = graphfuse.apply(ep, rules, progress=lambda done, total: calls.append((done, total)))
    assert fingerprint(ep) == before, "apply mutated its input"
    check_graph(res.program.graph)
    sweeps = [total for done, total in calls if done == total]
    return res, sweeps


def test_creating_an_op_a_pattern_names_brings_a_full_sweep():
    """to_neg creates a neg, which exp_neg's pattern names; exp_neg (priority 1) visited
    its candidate before, so it fires in the second sweep, a full one (both candidates)."""
    res, sweeps = _apply(
        relu_then_exp,
        rs(
            Rule("to_neg", P.op(aten.relu, X), to_neg),
            Rule("exp_neg", P.op(aten.exp, P.op(aten.neg, X)), to_abs, priority=1),
        ),
    )
    assert res.report.counts == {"to_neg": 1, "exp_neg": 1}
    # sweep 1: exp (no neg yet), relu; sweep 2: everything again (the exp); sweep 3: abs
    # is named by no pattern, so only retries, and there are none
    assert sweeps == [2, 1, 0] and res.report.iterations == 3


def test_creating_nothing_a_pattern_names_ends_after_one_more_sweep():
    res, sweeps = _apply(relu_then_exp, rs(Rule("relu_abs", P.op(aten.relu, X), to_abs)))
    assert res.report.counts == {"relu_abs": 1}
    assert sweeps == [1, 0] and res.report.iterations == 2


def test_an_escape_is_retried_in_the_next_sweep():
    """relu(neg(x)) escapes (neg also feeds y * neg); mul_y, later in the sweep, removes
    that user; the second sweep retries only the relu, and it fires; the third finds
    nothing to retry."""
    res, sweeps = _apply(
        escape_to_removed,
        rs(Rule("abs", RELU_NEG, to_abs), Rule("mul_y", P.op(aten.mul.Tensor, X, P._), to_abs)),
        n_in=2,
    )
    assert res.report.counts == {"abs": 1, "mul_y": 1}
    assert sweeps == [2, 1, 0] and res.report.iterations == 3
    assert not res.report.near_misses  # the escape's near miss went with the relu


def test_a_retry_whose_node_a_later_match_removed_is_skipped():
    """relu(neg) escapes (neg is an output too) and is kept for a retry; exp_relu removes
    the relu later in the sweep: the retry still counts in the second sweep's total, and
    is skipped without matching."""

    def fn(x):
        t = -x
        return torch.exp(torch.relu(t)), t

    res, sweeps = _apply(
        fn,
        rs(
            Rule("abs", RELU_NEG, to_abs),
            Rule("exp_relu", P.op(aten.exp, P.op(aten.relu, X)), to_abs),
        ),
    )
    assert res.report.counts == {"abs": 0, "exp_relu": 1}
    assert sweeps == [2, 1] and res.report.iterations == 2


def test_apply_twice_changes_nothing_the_second_time():
    ep = export(Silu(), (torch.randn(3, 8),))
    rules = rs(
        Rule("silu", P.op(aten.mul, X, P.op(aten.sigmoid, X), commutative=True), _silu),
        Rule("sigmoid_tanh", P.op(aten.sigmoid, X), _sigmoid_as_tanh, priority=-1),
    )
    first = check_rewrite(
        ep, rules, lambda s: (randn(3, 8, seed=s),), {"silu": 1, "sigmoid_tanh": 0}
    )
    second = graphfuse.apply(first.program, rules)
    assert second.report.total == 0 and second.report.iterations == 1
    assert graph_code(second.program) == graph_code(first.program)


def _silu(m, b):
    return b.call(aten.silu.default, m["x"])


def _sigmoid_as_tanh(m, b):
    t = b.call(aten.tanh.default, b.call(aten.mul.Tensor, m["x"], 0.5))
    return b.call(aten.mul.Tensor, b.call(aten.add.Tensor, t, 1.0), 0.5)


def _cycle():
    there = Rule(
        "mul_to_add",
        P.op(aten.mul.Tensor, X, 2.0),
        lambda m, b: b.call(aten.add.Tensor, m["x"], m["x"]),
    )
    back = Rule(
        "add_to_mul",
        P.op(aten.add.Tensor, X, X),
        lambda m, b: b.call(aten.mul.Tensor, m["x"], 2.0),
    )
    return rs(there, back, name="cycle")


def test_rules_undoing_each_other_hit_the_fixpoint_bound():
    ep = export(lambda x: x * 2.0, (torch.randn(3),))
    before = fingerprint(ep)
    with pytest.raises(graphfuse.FixpointError) as err:
        graphfuse.apply(ep, _cycle())
    assert str(err.value) == (
        "rule set cycle still rewrote after 32 sweeps (rules add_to_mul keep firing); "
        "do they undo each other?"
    )
    assert fingerprint(ep) == before


def test_the_fixpoint_bound_is_a_parameter():
    ep = export(lambda x: x * 2.0, (torch.randn(3),))
    graph = copy_graph(ep)
    with pytest.raises(graphfuse.FixpointError, match="after 3 sweeps"):
        run_rules(graph, _cycle(), max_iterations=3)
    check_graph(graph)  # left consistent, mid-cycle
    # a bound that the rule set reaches without cycling is no error
    ok = run_rules(
        copy_graph(ep), rs(Rule("abs", P.op(aten.mul.Tensor, X, 2.0), to_abs)), max_iterations=2
    )
    assert ok.counts == {"abs": 1} and ok.iterations == 2
