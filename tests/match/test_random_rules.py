"""Random rule sets against real exported graphs: the matcher only reports, never raises;
the fixpoint is bounded and a cycling rule set ends with a clear error."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graphfuse
from graphfuse import Rule, RuleSet
from graphfuse import dsl as P
from tests.fuzz._programs import AttnStep, MixStep, RandomProgram, example_inputs

from ._random_patterns import rooted

aten = torch.ops.aten


@pytest.fixture(scope="module")
def programs():
    steps = [
        AttnStep(0, "sdpa", "repeat_kv", "bool", "bs(hd)", "div", "none"),
        MixStep(0, 2, "mul"),
        AttnStep(3, "hand", "interleave", "causal", "bhsd", "min_max", "extra_user"),
    ]
    ep = torch.export.export(RandomProgram(steps), example_inputs(0))
    return [ep, ep.run_decompositions()]


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(pats=st.lists(rooted(), min_size=1, max_size=4), data=st.data())
def test_matcher_only_reports(programs, pats, data):
    checks = [
        None,
        lambda m: m.require("B % 2 == 0") if m.dims.get("B") else None,
        lambda m: m.fail("nope {x}", x=1),
    ]
    rules = RuleSet(
        "random",
        [
            Rule(f"r{i}", p, lambda m, b: m.root, data.draw(st.sampled_from(checks)))
            for i, p in enumerate(pats)
        ],
    )
    for ep in programs:
        before = ep.graph_module.code
        report = graphfuse.explain(ep, rules, min_depth=1)
        for miss in report.near_misses:
            assert str(miss) and miss.rule in {r.name for r in rules}
        dry = graphfuse.apply(ep, rules, dry_run=True)
        assert dry.program is ep and ep.graph_module.code == before
        assert all(v >= 0 for v in dry.report.counts.values())


def test_cycling_rule_set_ends_with_a_clear_error(programs):
    x = P.tensor("x")
    to_add = Rule(
        "to_add", P.op(aten.mul.Tensor, x, 1), lambda m, b: b.call(aten.add.Tensor, m["x"], 0)
    )
    to_mul = Rule(
        "to_mul", P.op(aten.add.Tensor, x, 0), lambda m, b: b.call(aten.mul.Tensor, m["x"], 1)
    )

    class M(torch.nn.Module):
        def forward(self, a):
            return a * 1

    ep = torch.export.export(M(), (torch.randn(3),))
    before = ep.graph_module.code
    with pytest.raises(graphfuse.FixpointError, match=r"still rewrote after 32 sweeps"):
        graphfuse.apply(ep, RuleSet("cycle", [to_add, to_mul]))
    assert ep.graph_module.code == before
