"""Overlapping matches and rewrites that meet within a sweep: the candidates are visited by
priority, then position, then the rule's place in the set; each match is applied as it is
found, so a later candidate sees the graph the earlier rewrites left (their replacements,
never the nodes they removed) and a candidate whose root is gone is skipped."""

from __future__ import annotations

import pytest
import torch

import graphfuse
from graphfuse import Rule
from graphfuse import dsl as P
from tests._models import Silu, check_rewrite, export, gftest, randn

from ._workloads import (
    RELU_NEG,
    X,
    chained,
    check_graph,
    escape_to_removed,
    exp_over,
    relu_then_exp,
    relu_times,
    rs,
    to_abs,
    to_neg,
)

aten = torch.ops.aten
SIGMOID = P.op(aten.sigmoid, X)
SILU = P.op(aten.mul, X, SIGMOID, commutative=True)


def _silu(name="aten_silu", **kw):
    return Rule(name, SILU, lambda m, b: b.call(aten.silu.default, m["x"]), **kw)


def _custom(name="custom_silu", **kw):
    return Rule(name, SILU, lambda m, b: b.call(gftest.silu.default, m["x"]), **kw)


def _sigmoid_to_tanh(name="sigmoid_tanh", **kw):
    """sigmoid(x) = (tanh(x / 2) + 1) / 2, rooted at the sigmoid (earlier than the mul)."""

    def rewrite(m, b):
        t = b.call(aten.tanh.default, b.call(aten.mul.Tensor, m["x"], 0.5))
        return b.call(aten.mul.Tensor, b.call(aten.add.Tensor, t, 1.0), 0.5)

    return Rule(name, SIGMOID, rewrite, **kw)


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
    res = check_rewrite(silu_ep, rs(*rule_list), _inputs, expect)
    check_graph(res.program.graph)
    if winner == "sigmoid_tanh":  # the silu lost its sigmoid: nothing of it is left
        assert not res.program.graph.find_nodes(op="call_function", target=aten.sigmoid.default)


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_tie_at_one_root_is_reported(silu_ep, dry_run):
    """Two rules of one priority that both match at one root: the earlier in the set
    fires, the report says the other lost and why (apply and dry run alike)."""
    res = graphfuse.apply(silu_ep, rs(_silu(), _custom()), dry_run=dry_run)
    assert res.report.counts == {"aten_silu": 1, "custom_silu": 0}
    (o,) = res.report.overlaps
    assert (o.rule, o.lost_to, o.node, o.at) == ("custom_silu", "aten_silu", "mul", "mul")
    assert str(o) == (
        "custom_silu lost to aten_silu at mul (same priority and root, earlier in the rule set)"
    )
    assert res.report.to_dict()["overlaps"] == [o.to_dict()]


def test_no_overlap_where_the_other_rule_would_not_match(silu_ep):
    never = Rule(
        "never", SILU, lambda m, b: b.call(aten.silu.default, m["x"]), check=lambda m: "no"
    )
    res = graphfuse.apply(silu_ep, rs(_silu(), never))
    assert res.report.counts["aten_silu"] == 1 and res.report.overlaps == []


@pytest.mark.parametrize(
    ("rule_list", "why"),
    [
        ((_silu(), _custom(priority=1)), "priority 1 over 0"),
        ((_silu(), _sigmoid_to_tanh()), "same priority, its root sigmoid comes first in the graph"),
    ],
)
def test_a_dry_run_reports_every_match_an_earlier_one_took(silu_ep, rule_list, why):
    """In a dry run every candidate whose nodes an earlier match took is tried: those
    that would match are reported with the order that decided."""
    res = graphfuse.apply(silu_ep, rs(*rule_list), dry_run=True)
    (o,) = res.report.overlaps
    winner = next(name for name, n in res.report.counts.items() if n)
    assert o.lost_to == winner and o.why == why and o.rule != winner


def _apply(fn, rules, n_in=1):
    ep = export(fn, tuple(torch.randn(3, 4) for _ in range(n_in)))
    res = graphfuse.apply(ep, rules)
    check_graph(res.program.graph)
    return res


def _calls(res) -> list[str]:
    """The rewritten program's calls as ``target(args)`` with nodes by name."""
    out = []
    for n in res.program.graph.nodes:
        if n.op == "call_function":
            args = torch.fx.map_arg(n.args, lambda a: a.name)
            out.append(f"{n.target.__name__}{tuple(args)}")
    return out


def test_a_rewrite_is_seen_by_the_next_candidate_of_the_sweep():
    """relu -> neg, then exp(neg(x)) matches the new neg in the same sweep; nothing is
    mentioned again after, so one more sweep finds nothing."""
    res = _apply(
        relu_then_exp,
        rs(
            Rule("to_neg", P.op(aten.relu, X), to_neg),
            Rule("exp_neg", P.op(aten.exp, P.op(aten.neg, X)), to_abs),
        ),
    )
    assert res.report.counts == {"to_neg": 1, "exp_neg": 1}
    assert res.report.iterations == 2
    assert _calls(res) == ["abs.default('x',)"]


def test_a_later_block_binds_the_replacement_of_an_earlier_root():
    """relu(-relu(-x)): the second block's x is the first block's root; it binds the
    replacement."""
    res = _apply(chained, rs(Rule("abs", RELU_NEG, to_abs)))
    assert res.report.counts == {"abs": 2}
    assert _calls(res) == ["abs.default('x',)", "abs.default('abs_default',)"]


def test_a_list_bound_whole_holds_the_replacement_of_an_earlier_root():
    """cat([relu(-x), x]) after abs replaced the relu: the list holds the abs."""
    res = _apply(
        lambda x: torch.cat([torch.relu(-x), x], 0),
        rs(
            Rule("abs", RELU_NEG, to_abs, priority=1),
            Rule(
                "cat",
                P.op(aten.cat, P.any("xs")),
                lambda m, b: b.call(aten.concat.default, m["xs"][::-1]),
            ),
        ),
    )
    assert res.report.counts == {"abs": 1, "cat": 1}
    assert _calls(res) == ["abs.default('x',)", "concat.default(['x', 'abs_default'],)"]


@pytest.mark.parametrize("bound", ["capture", "list item", "list"])
def test_an_earlier_match_may_bind_a_later_root(bound):
    """The first match (priority 1) binds the relu that a later match replaces: it reads
    the relu's replacement once that is built."""
    if bound == "capture":
        fn, pat = exp_over, P.op(aten.exp, X)
        rewrite = lambda m, b: b.call(aten.sigmoid.default, m["x"])  # noqa: E731
        want = ["abs.default('x',)", "sigmoid.default('abs_default',)"]
    else:
        fn = lambda x: torch.cat([torch.relu(-x), x], 0)  # noqa: E731
        if bound == "list item":
            pat = P.op(aten.cat, [X, P.tensor("y")])
            rewrite = lambda m, b: b.call(aten.concat.default, [m["y"], m["x"]])  # noqa: E731
        else:
            pat = P.op(aten.cat, P.any("xs"))
            rewrite = lambda m, b: b.call(aten.concat.default, m["xs"][::-1])  # noqa: E731
        want = ["abs.default('x',)", "concat.default(['x', 'abs_default'],)"]
    res = _apply(fn, rs(Rule("abs", RELU_NEG, to_abs), Rule("first", pat, rewrite, priority=1)))
    assert res.report.counts == {"abs": 1, "first": 1}
    # the first match read the relu; the abs rewrite replaced it in the first one's output
    assert _calls(res) == want


def test_a_match_holding_a_removed_node_does_not_happen():
    """exp(relu(x)) after abs(priority 1) removed the relu: exp now reads the abs, so the
    lower-priority exp_relu finds no relu there."""
    res = _apply(
        exp_over,
        rs(
            Rule("abs", RELU_NEG, to_abs, priority=1),
            Rule("exp_relu", P.op(aten.exp, P.op(aten.relu, X)), to_abs),
        ),
    )
    assert res.report.counts == {"abs": 1, "exp_relu": 0}
    assert _calls(res) == ["abs.default('x',)", "exp.default('abs_default',)"]


def test_a_check_reads_the_graph_the_earlier_rewrites_left():
    """relu_abs (priority 1) replaces relu(a) by abs(a); the check of mul_neg reads what its
    wildcard matched: the abs."""
    res = _apply(
        relu_times,
        rs(
            Rule("relu_abs", P.op(aten.relu, X), to_abs, priority=1),
            Rule(
                "mul_neg",
                P.op(aten.mul.Tensor, P._, P.tensor("y")),
                lambda m, b: b.call(aten.neg.default, m["y"]),
                check=lambda m: None if m.root.args[0].target is aten.abs.default else "not abs",
            ),
        ),
        n_in=2,
    )
    assert res.report.counts == {"relu_abs": 1, "mul_neg": 1}
    assert not res.report.near_misses


def test_a_solution_turned_down_on_the_input_may_fire_after_an_earlier_rewrite():
    """relu(x) wants a contiguous x; on the input x is a transpose (strided); t_view
    (priority 1) replaces it by a contiguous view first, so relu_contig fires."""
    res = _apply(
        lambda x: torch.relu(x.reshape(4, 3).t()),
        rs(
            Rule(
                "t_view",
                P.op(aten.t, X),
                lambda m, b: b.call(aten.view.default, m["x"], [3, 4]),
                priority=1,
            ),
            Rule(
                "relu_contig",
                P.op(aten.relu, X),
                to_abs,
                lambda m: None if m.val("x").is_contiguous() else "x is strided",
            ),
        ),
    )
    assert res.report.counts == {"t_view": 1, "relu_contig": 1}
    assert _calls(res)[-2:] == ["view.default('reshape', [3, 4])", "abs.default('view_default',)"]


def test_an_escape_removed_by_an_earlier_match_does_not_block():
    """relu(neg(x)) escapes on the input (neg also feeds y * neg); mul_y (priority 1)
    removes that user first, so abs fires in the same sweep."""
    res = _apply(
        escape_to_removed,
        rs(
            Rule("abs", RELU_NEG, to_abs),
            Rule("mul_y", P.op(aten.mul.Tensor, X, P._), to_abs, priority=1),
        ),
        n_in=2,
    )
    assert res.report.counts == {"abs": 1, "mul_y": 1}
    assert res.report.iterations == 2 and not res.report.near_misses


def test_one_root_claimed_by_two_rules_is_rewritten_once():
    """Both rules match relu(neg(x)) at the same root: the first in the set rewrites it,
    the second finds it gone (no match, no near miss)."""
    res = _apply(
        lambda x: torch.relu(-x) * 1.5,
        rs(
            Rule("abs", RELU_NEG, to_abs),
            Rule("sig", RELU_NEG, lambda m, b: b.call(aten.sigmoid.default, m["x"])),
        ),
    )
    assert res.report.counts == {"abs": 1, "sig": 0}
    assert not res.report.near_misses
    assert _calls(res) == ["abs.default('x',)", "mul.Tensor('abs_default', 1.5)"]


def test_dry_run_counts_overlaps_once():
    from tests._models import SiluChain

    ep = export(SiluChain(3), (torch.randn(4),))
    res = graphfuse.apply(ep, rs(_silu(), _custom()), dry_run=True)
    assert res.report.counts == {"aten_silu": 3, "custom_silu": 0}


def _walk_two(m, b):
    """Reads the relu's input's input by walking from the root, not through a capture."""
    return b.call(aten.abs.default, m.root.args[0].args[0])


RELU_NEG_ANY = P.op(aten.relu, P.op(aten.neg, P._))


@pytest.mark.parametrize(
    ("fn", "fired", "calls"),
    [
        (exp_over, 1, ["abs.default('x',)", "exp.default('abs_default',)"]),
        # the second block walks to the first block's root: by then its replacement
        (chained, 2, ["abs.default('x',)", "abs.default('abs_default',)"]),
    ],
)
def test_a_rewrite_walking_from_its_root_reads_the_graph_as_rewritten(fn, fired, calls):
    res = _apply(fn, rs(Rule("walk", RELU_NEG_ANY, _walk_two)))
    assert res.report.counts == {"walk": fired}
    assert _calls(res) == calls


def test_a_node_read_before_an_edit_is_read_anew_after_it():
    """add(relu(x), y, alpha=2): abs_add (priority 1) reads the add first (its alpha is a
    keyword, so the add's arguments are normalized) and finds no abs; relu_abs then
    replaces the add's first argument; the next sweep reads the edited add, not what was
    normalized before the edit."""
    res = _apply(
        lambda x, y: torch.add(torch.relu(x), y, alpha=2),
        rs(
            Rule(
                "abs_add",
                P.op(aten.add.Tensor, P.op(aten.abs, X), P.tensor("y"), alpha=2),
                lambda m, b: b.call(aten.sub.Tensor, m["y"], m["x"]),
                priority=1,
            ),
            Rule("relu_abs", P.op(aten.relu, X), to_abs),
        ),
        n_in=2,
    )
    assert res.report.counts == {"abs_add": 1, "relu_abs": 1}
    assert res.report.iterations == 3
    assert _calls(res) == ["sub.Tensor('y', 'x')"]
