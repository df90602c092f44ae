"""What a run reports: counts for every rule of the set, near misses (dropped where the node
went with a later match), sweeps, phases timed, progress per sweep, and a dry run that
counts and changes nothing."""

from __future__ import annotations

import json

import pytest
import torch

import graphfuse
from graphfuse import Rule
from graphfuse import dsl as P
from graphfuse.io import copy_graph
from graphfuse.run import run_rules
from tests._models import Silu, export

from ._workloads import RELU_NEG, X, fingerprint, rs, three_sites, to_abs

aten = torch.ops.aten
SILU = P.op(aten.mul, X, P.op(aten.sigmoid, X), commutative=True)
ESCAPE = "neg_1 (aten.neg) is also used by the graph's output outside the match"


@pytest.fixture(scope="module")
def three():
    return export(three_sites, (torch.randn(3, 4),))


def _silu():
    return Rule("aten_silu", SILU, lambda m, b: b.call(aten.silu.default, m["x"]))


def test_report_dict_json_and_line():
    ep = export(Silu(), (torch.randn(3, 8),))
    report = graphfuse.apply(ep, rs(_silu(), Rule("never", P.op(aten.cos, X), to_abs))).report
    d = report.to_dict()
    assert d["rule_set"] == "t" and d["counts"] == {"aten_silu": 1, "never": 0}
    assert d["total"] == 1 and d["near_misses"] == [] and d["iterations"] == 2
    assert d["dry_run"] is False and d["skipped"] == ""
    assert sorted(d["timings"]) == ["copy", "recompile", "rewrite"]
    assert all(t >= 0 for t in d["timings"].values())
    assert json.loads(report.to_json()) == d
    assert str(report) == "t: aten_silu=1; 0 near miss(es)"


def test_near_misses_name_rule_node_reason_and_target(three):
    report = graphfuse.apply(three, rs(Rule("abs", RELU_NEG, to_abs))).report
    assert report.counts == {"abs": 2}
    (miss,) = report.near_misses
    assert (miss.rule, miss.node, miss.reason, miss.target) == ("abs", "neg_1", ESCAPE, "aten.neg")
    assert str(miss) == f"rule abs at neg_1: {ESCAPE}"
    (neg_1,) = [n for n in three.graph.nodes if n.name == "neg_1"]
    assert miss.stack_trace and miss.stack_trace == neg_1.meta["stack_trace"]
    assert miss.source_line().startswith('File "') and ", line " in miss.source_line()
    assert str(report) == "t: abs=2; 1 near miss(es)"


def test_a_near_miss_at_a_node_a_later_match_removed_is_dropped(three):
    """ "never" (priority 1) misses at all three negs; two of them go with abs's matches."""
    never = Rule("never", P.op(aten.neg, X), to_abs, lambda m: m.fail("never"), priority=1)
    report = graphfuse.apply(three, rs(Rule("abs", RELU_NEG, to_abs), never)).report
    assert report.counts == {"abs": 2, "never": 0}
    assert [(nm.rule, nm.node, nm.reason) for nm in report.near_misses] == [
        ("never", "neg_1", "never"),
        ("abs", "neg_1", ESCAPE),  # the escape at the second site
    ]


def test_dry_run_counts_but_changes_nothing(three):
    before = fingerprint(three)
    rules = rs(Rule("abs", RELU_NEG, to_abs))
    dry = graphfuse.apply(three, rules, dry_run=True)
    assert dry.program is three and fingerprint(three) == before
    report = dry.report
    assert report.dry_run and report.counts == {"abs": 2} and report.iterations == 1
    assert [(nm.rule, nm.node, nm.reason) for nm in report.near_misses] == [
        ("abs", "neg_1", ESCAPE)
    ]
    assert sorted(report.timings) == ["rewrite"]
    # run_rules(dry_run=True) on a graph leaves it as it was
    graph = copy_graph(three)
    nodes = [(n.name, n.target, n.args) for n in graph.nodes]
    assert run_rules(graph, rules, dry_run=True).counts == {"abs": 2}
    assert [(n.name, n.target, n.args) for n in graph.nodes] == nodes


def test_progress_reports_every_256_candidates_of_each_sweep():
    from tests._models import SiluChain

    ep = export(SiluChain(300), (torch.randn(4),))
    calls: list[tuple[int, int]] = []
    res = graphfuse.apply(ep, rs(_silu()), progress=lambda done, total: calls.append((done, total)))
    assert res.report.counts == {"aten_silu": 300}
    # sweep 1: the 300 muls (silu's root is a mul; the adds of the chain are no candidates);
    # sweep 2: the new silus are named by no pattern and nothing escaped: no candidates
    assert calls == [(0, 300), (256, 300), (300, 300), (0, 0)]


def test_a_check_turning_a_match_down_is_a_near_miss_at_its_root(three):
    """The escape is found before the check runs; the check's reason names the root."""
    rule = Rule("abs", RELU_NEG, to_abs, lambda m: None if m.root.name == "relu" else "not first")
    report = graphfuse.apply(three, rs(rule)).report
    assert report.counts == {"abs": 1}
    assert [(nm.rule, nm.node, nm.reason) for nm in report.near_misses] == [
        ("abs", "neg_1", ESCAPE),
        ("abs", "relu_2", "not first"),
    ]
