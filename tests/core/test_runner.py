"""The runner: overlaps by priority then position, fixpoint, dry runs, GraphModule input,
and the structural complexity guard (matcher calls grow linearly with the graph)."""

from __future__ import annotations

import pytest
import torch

import graphfuse
import graphfuse._matcher as matcher_mod
import graphfuse._runner as runner_mod
from graphfuse import dsl as P

from ._models import (
    Silu,
    SiluChain,
    aten,
    check_rewrite,
    export,
    gftest,
    graph_code,
    randn,
    rules,
    targets,
)

X = P.tensor("x")
SILU = P.op(aten.mul, X, P.op(aten.sigmoid, X), commutative=True)


def _silu(name="aten_silu", **kw):
    return graphfuse.Rule(name, SILU, lambda m, b: b.call(aten.silu.default, m["x"]), **kw)


def _custom(name="custom_silu", **kw):
    return graphfuse.Rule(name, SILU, lambda m, b: b.call(gftest.silu.default, m["x"]), **kw)


def _sigmoid_to_tanh(name="sigmoid_tanh", **kw):
    """sigmoid(x) = (tanh(x / 2) + 1) / 2, rooted at the sigmoid (earlier than the mul)."""

    def rewrite(m, b):
        t = b.call(aten.tanh.default, b.call(aten.mul.Tensor, m["x"], 0.5))
        return b.call(aten.mul.Tensor, b.call(aten.add.Tensor, t, 1.0), 0.5)

    return graphfuse.Rule(name, P.op(aten.sigmoid, X), rewrite, **kw)


@pytest.fixture(scope="module")
def silu_ep():
    return export(Silu(), (torch.randn(3, 8),))


def _inputs(seed):
    return (randn(3, 8, seed=seed),)


@pytest.mark.parametrize(
    ("rule_list", "winner"),
    [
        ((_silu(), _custom()), "aten_silu"),  # same priority and root: the earlier rule
        ((_custom(), _silu()), "custom_silu"),
        ((_silu(), _custom(priority=1)), "custom_silu"),  # priority first
        ((_sigmoid_to_tanh(), _silu()), "sigmoid_tanh"),  # then position: sigmoid first
        ((_silu(), _sigmoid_to_tanh()), "sigmoid_tanh"),
        ((_sigmoid_to_tanh(), _silu(priority=1)), "aten_silu"),
    ],
)
def test_overlaps_resolve_by_priority_then_position(silu_ep, rule_list, winner):
    expect = {r.name: int(r.name == winner) for r in rule_list}
    check_rewrite(silu_ep, rules(*rule_list), _inputs, expect)


def test_apply_twice_changes_nothing_the_second_time(silu_ep):
    rs = rules(_silu(), _sigmoid_to_tanh(priority=-1))
    first = check_rewrite(silu_ep, rs, _inputs, {"aten_silu": 1, "sigmoid_tanh": 0})
    second = graphfuse.apply(first.program, rs)
    assert second.report.total == 0 and second.report.iterations == 1
    assert graph_code(second.program) == graph_code(first.program)


def test_rules_undoing_each_other_hit_the_fixpoint_bound(silu_ep):
    there = graphfuse.Rule(
        "mul_to_add",
        P.op(aten.mul.Tensor, X, 2.0),
        lambda m, b: b.call(aten.add.Tensor, m["x"], m["x"]),
    )
    back = graphfuse.Rule(
        "add_to_mul",
        P.op(aten.add.Tensor, X, X),
        lambda m, b: b.call(aten.mul.Tensor, m["x"], 2.0),
    )
    ep = export(lambda x: x * 2.0, (torch.randn(3),))
    before = graph_code(ep)
    with pytest.raises(graphfuse.FixpointError) as err:
        graphfuse.apply(ep, rules(there, back, name="cycle"))
    assert str(err.value) == (
        "rule set cycle still rewrote after 32 sweeps (rules add_to_mul keep firing); "
        "do they undo each other?"
    )
    assert graph_code(ep) == before


def test_dry_run_counts_but_changes_nothing(silu_ep):
    before = graph_code(silu_ep)
    res = graphfuse.apply(silu_ep, rules(_silu()), dry_run=True)
    assert res.program is silu_ep
    assert res.report.counts == {"aten_silu": 1} and res.report.dry_run
    assert graph_code(silu_ep) == before


def test_dry_run_counts_overlaps_once():
    ep = export(SiluChain(3), (torch.randn(4),))
    res = graphfuse.apply(ep, rules(_silu(), _custom()), dry_run=True)
    assert res.report.counts == {"aten_silu": 3, "custom_silu": 0}


def test_graph_module_input(silu_ep):
    gm = silu_ep.module()
    res = check_rewrite(gm, rules(_silu()), _inputs, {"aten_silu": 1})
    assert isinstance(res.program, torch.fx.GraphModule) and res.program is not gm
    assert aten.silu.default in targets(res.program)
    assert aten.silu.default not in targets(gm)
    dry = graphfuse.apply(gm, rules(_silu()), dry_run=True)
    assert dry.program is gm and dry.report.counts == {"aten_silu": 1}


def test_not_a_program():
    with pytest.raises(graphfuse.GraphfuseError, match="not Linear"):
        graphfuse.apply(torch.nn.Linear(2, 2), rules(_silu()))


def test_report_dict(silu_ep):
    report = graphfuse.apply(silu_ep, rules(_silu())).report
    d = report.to_dict()
    assert d["counts"] == {"aten_silu": 1} and d["total"] == 1 and d["near_misses"] == []
    assert str(report) == "test: aten_silu=1; 0 near miss(es)"


# ------------------------------------------------------------------ complexity guard


def _counted(monkeypatch):
    calls = {"match_rule": 0, "_m": 0}
    real_rule = runner_mod.match_rule

    def count_rule(*a, **k):
        calls["match_rule"] += 1
        before = matcher_mod.VISITS[0]
        try:
            return real_rule(*a, **k)
        finally:
            calls["_m"] += matcher_mod.VISITS[0] - before  # pattern-node visits

    monkeypatch.setattr(runner_mod, "match_rule", count_rule)
    return calls


@pytest.fixture(scope="module")
def chains():
    return {n: export(SiluChain(n), (torch.randn(4),)) for n in (4, 16, 64)}


def test_matching_work_is_linear_in_graph_size(chains, monkeypatch):
    """Counts matcher invocations (never wall-clock) for chains of N silu blocks."""
    calls = _counted(monkeypatch)
    rs = rules(_silu(), _sigmoid_to_tanh(priority=-1), _custom(priority=-2))
    seen = {}
    for n, ep in chains.items():
        calls.update(match_rule=0, _m=0)
        res = graphfuse.apply(ep, rs)
        assert res.report.counts["aten_silu"] == n
        seen[n] = dict(calls)
        # per block: 3 rules at most on its mul/sigmoid, in at most 2 sweeps
        assert calls["match_rule"] <= 6 * n, (n, calls)
        assert calls["_m"] <= 40 * n, (n, calls)
    assert seen[64]["match_rule"] <= 16 * seen[4]["match_rule"] + 8
    assert seen[64]["_m"] <= 16 * seen[4]["_m"] + 40
