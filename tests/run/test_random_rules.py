"""Random rule sets over real programs: rules cut from the programs' own subgraphs (so they
match, overlap, chain and meet metadata asserts) and random dsl patterns, rewritten to a
stand-in op. Whatever they do, ``apply`` leaves its input untouched, hands back a valid
graph holding one stand-in per counted rewrite, runs, and does the same every time."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graphfuse
from graphfuse import Rule, RuleSet
from graphfuse.io import graph_module_of
from tests._chain import chain_inputs
from tests.match._random_patterns import rooted

from ._workloads import (
    STAND_IN,
    chain,
    check_graph,
    demo,
    demo_inputs_for,
    fingerprint,
    program_inputs,
    random_program,
    random_rules,
    run_seeded,
    stand_in_rewrite,
    tensor_root,
)


def check_apply(program, rules, inputs) -> graphfuse.Result:
    """Apply ``rules`` twice; check everything that holds whatever the rules are."""
    before = fingerprint(program)
    res = graphfuse.apply(program, rules)
    assert fingerprint(program) == before, "apply mutated its input"
    graph = graph_module_of(res.program).graph
    check_graph(graph)
    if isinstance(res.program, torch.export.ExportedProgram):
        res.program.validate()
    # no pattern names the stand-in, so no later match removes one
    made = graph.find_nodes(op="call_function", target=STAND_IN)
    assert len(made) == res.report.total, (len(made), res.report.counts)
    assert set(res.report.counts) == {r.name for r in rules}
    again = graphfuse.apply(program, rules)
    assert fingerprint(again.program) == fingerprint(res.program), "apply is not deterministic"
    assert again.report.counts == res.report.counts
    assert [str(m) for m in again.report.near_misses] == [str(m) for m in res.report.near_misses]
    xs = inputs(1) if callable(inputs) else inputs
    out, out_again = run_seeded(res.program, xs), run_seeded(again.program, xs)
    flat, flat_again = (torch.utils._pytree.tree_flatten(o)[0] for o in (out, out_again))
    assert all(torch.equal(a, b) for a, b in zip(flat, flat_again, strict=True))
    return res


PROGRAMS = {
    "chain-core": (lambda: chain("core", 4), chain_inputs),
    "chain-export": (lambda: chain("export", 3), chain_inputs),
    "program0-core": (lambda: random_program(0, True), program_inputs),
    "program1-export": (lambda: random_program(1, False), program_inputs),
    "demo-fp8-export": (lambda: demo("fp8", False), demo_inputs_for),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_rules_cut_from_the_program(name):
    build, inputs = PROGRAMS[name]
    program = build()
    fired = 0
    for seed in range(5):
        rules = random_rules(program, seed, k=1 + seed % 4)
        print(f"{name} seed {seed}: {[(r.name, r.priority, r.pattern) for r in rules]}")
        res = check_apply(program, rules, inputs)
        print(f"  -> {res.report.counts}")
        fired += res.report.total
    assert fired > 0  # the cut rules matched somewhere


@pytest.fixture(scope="module")
def programs():
    return [random_program(0, False), random_program(1, True)]


@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(pats=st.lists(rooted(), min_size=1, max_size=3), data=st.data())
def test_random_dsl_patterns(programs, pats, data):
    prios = data.draw(st.lists(st.integers(0, 2), min_size=len(pats), max_size=len(pats)))
    rules = RuleSet(
        "random",
        [
            Rule(f"r{i}", p, stand_in_rewrite(i), tensor_root, priority=prio)
            for i, (p, prio) in enumerate(zip(pats, prios))
        ],
    )
    for program in programs:
        check_apply(program, rules, program_inputs)
