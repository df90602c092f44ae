"""The planned first sweep's fallbacks (see ``test_planned_sweep.py`` for the harness):
each trigger falls back and gives the plain runner's result; the triggers are real (the
plain runner decides otherwise on the unmodified input); random local rule sets stay
exact, planned or not."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graphfuse
from graphfuse import Rule, RuleSet
from graphfuse import _plan as plan
from graphfuse import dsl as P
from tests._chain import chain_inputs
from tests.fuzz.test_random_rules import _rooted

from ._exact import (
    fell_back,
    not_planned,
    planned,
    run_both,
)
from ._models import aten, export
from ._plan_workloads import (
    RELU_NEG,
    X,
    chain,
    chained,
    demo,
    demo_inputs_for,
    escape_to_removed,
    exp_over,
    local,
    program_inputs,
    random_local_rules,
    random_program,
    relu_then_exp,
    relu_times,
    rs,
    stand_in_rewrite,
    tensor_root,
    to_abs,
)


def _walk_two(m, b):
    return b.call(aten.abs.default, m.root.args[0].args[0])


def _walk_one(m, b):
    return b.call(aten.abs.default, m.root.args[0])  # a matched intermediate


def _not_local():
    return Rule("plain", P.op(aten.exp, X), lambda m, b: b.call(aten.sigmoid.default, m["x"]))


RELU_NEG_ANY = P.op(aten.relu, P.op(aten.neg, P._))

# (program, rules, expectation): "fallback", or "not planned" for (a)
FALLBACK_CASES = {
    # (a) one rule of the set is not local
    "a-non-local": (exp_over, lambda: rs(local("abs", RELU_NEG, to_abs), _not_local())),
    # (b) relu -> neg, and a later candidate's pattern sees the new neg (exp(neg(x)))
    "b-creates-matched": (
        relu_then_exp,
        lambda: rs(
            local("to_neg", P.op(aten.relu, X), lambda m, b: b.call(aten.neg.default, m["x"])),
            local("exp_neg", P.op(aten.exp, P.op(aten.neg, X)), to_abs),
        ),
    ),
    # (c) the second block binds the first block's root
    "c-binds-removed": (chained, lambda: rs(local("abs", RELU_NEG, to_abs))),
    # (c) ... inside a list bound whole: cat(xs), xs = [relu(neg(x)), x], after abs
    # replaced the relu
    "c-binds-removed-in-list": (
        lambda x: torch.cat([torch.relu(-x), x], 0),
        lambda: rs(
            local("abs", RELU_NEG, to_abs, priority=1),
            local(
                "cat",
                P.op(aten.cat, P.any("xs")),
                lambda m, b: b.call(aten.concat.default, m["xs"][::-1]),
            ),
        ),
    ),
    # (c) a lower-priority match contains the relu that the first match removes
    "c-contains-removed": (
        exp_over,
        lambda: rs(
            local("abs", RELU_NEG, to_abs, priority=1),
            local("exp_relu", P.op(aten.exp, P.op(aten.relu, X)), to_abs),
        ),
    ),
    # (d) the rewrite walks from the root to an input that no capture binds
    "d-walks-to-input": (exp_over, lambda: rs(local("walk", RELU_NEG_ANY, _walk_two))),
    # (d) ... and there it finds the first block's removed root (the plain runner: its
    # replacement)
    "d-walks-to-removed": (chained, lambda: rs(local("walk", RELU_NEG_ANY, _walk_two))),
    # (d) the rewrite uses a matched intermediate: both paths raise the same RewriteError
    "d-walks-to-matched": (exp_over, lambda: rs(local("walk", RELU_NEG_ANY, _walk_one))),
    # (e) the rewrite returns the root itself
    "e-returns-root": (exp_over, lambda: rs(local("same", RELU_NEG, lambda m, b: m.root))),
    # (e) the rewrite returns a matched intermediate
    "e-returns-intermediate": (
        exp_over,
        lambda: rs(local("inner", RELU_NEG, lambda m, b: m.root.args[0])),
    ),
    # (c) a turned-down solution holds a removed node: relu(x) wants a contiguous x; on the
    # input x is the transpose (strided), on the plain runner's graph its contiguous
    # replacement, so relu fires there
    "c-turned-down": (
        lambda x: torch.relu(x.reshape(4, 3).t()),
        lambda: rs(
            local(
                "t_view",
                P.op(aten.t, X),
                lambda m, b: b.call(aten.view.default, m["x"], [3, 4]),
                priority=1,
            ),
            local(
                "relu_contig",
                P.op(aten.relu, X),
                to_abs,
                lambda m: None if m.val("x").is_contiguous() else "x is strided",
            ),
        ),
    ),
    # (b) two rules undoing each other: both paths end in the same FixpointError
    "b-cycle": (
        lambda x: x * 1,
        lambda: rs(
            local(
                "to_add",
                P.op(aten.mul.Tensor, X, 1),
                lambda m, b: b.call(aten.add.Tensor, m["x"], 0),
            ),
            local(
                "to_mul",
                P.op(aten.add.Tensor, X, 0),
                lambda m, b: b.call(aten.mul.Tensor, m["x"], 1),
            ),
        ),
    ),
    # (f) relu(neg(x)) fails its escape check on the input (neg also feeds y * neg),
    # but the earlier match of y * _ removes that user
    "f-escape-to-removed": (
        escape_to_removed,
        lambda: rs(
            local("abs", RELU_NEG, to_abs),
            local("mul_y", P.op(aten.mul.Tensor, X, P._), to_abs, priority=1),
        ),
    ),
    # (c) a check reads what a wildcard matched: an earlier match's root, which on the
    # plain runner's graph is already its replacement
    "c-check-reads-wildcard": (
        relu_times,
        lambda: rs(
            local("relu_abs", P.op(aten.relu, X), to_abs, priority=1),
            local(
                "mul_neg",
                P.op(aten.mul.Tensor, P._, P.tensor("y")),
                lambda m, b: b.call(aten.neg.default, m["y"]),
                check=lambda m: None if m.root.args[0].target is aten.abs.default else "not abs",
            ),
        ),
    ),
}


@pytest.mark.parametrize("case", list(FALLBACK_CASES))
def test_fallback_triggers_are_exact(monkeypatch, case):
    fn, rules = FALLBACK_CASES[case]
    n_in = 2 if fn in (escape_to_removed, relu_times) else 1
    ep = export(fn, tuple(torch.randn(3, 4) for _ in range(n_in)))
    delta, _ = run_both(monkeypatch, ep, rules())
    if case.startswith("a-"):
        assert not_planned(delta), delta
    elif case == "b-cycle":  # run_both compared the two errors
        assert fell_back(delta), delta
        monkeypatch.setattr(plan, "ENABLED", False)
        with pytest.raises(graphfuse.FixpointError):
            graphfuse.apply(ep, rules())
    elif case == "d-walks-to-matched":  # run_both compared the two errors
        monkeypatch.setattr(plan, "ENABLED", False)
        with pytest.raises(graphfuse.RewriteError, match="which the match removes"):
            graphfuse.apply(ep, rules())
    else:
        assert fell_back(delta), delta


def test_the_triggers_change_what_the_plain_runner_does(monkeypatch):
    """The fallback cases are real: on the unmodified input their matches differ from the
    plain runner's (guards against a trigger case that silently stopped testing anything)."""
    monkeypatch.setattr(plan, "ENABLED", False)
    counts = {}
    for case in (
        "b-creates-matched",
        "c-binds-removed",
        "c-binds-removed-in-list",
        "c-turned-down",
        "f-escape-to-removed",
    ):
        fn, rules = FALLBACK_CASES[case]
        n_in = 2 if fn in (escape_to_removed, relu_times) else 1
        ep = export(fn, tuple(torch.randn(3, 4) for _ in range(n_in)))
        counts[case] = graphfuse.apply(ep, rules()).report.counts
    # both rules fire in one sweep: exp_neg sees to_neg's new node, the chained block sees
    # the first one's replacement, abs fires once mul_y removed the escaping user
    assert counts == {
        "b-creates-matched": {"to_neg": 1, "exp_neg": 1},
        "c-binds-removed": {"abs": 2},
        "c-binds-removed-in-list": {"abs": 1, "cat": 1},
        "c-turned-down": {"t_view": 1, "relu_contig": 1},
        "f-escape-to-removed": {"abs": 1, "mul_y": 1},
    }


# --------------------------------------------------------------------------- random local rules

RANDOM_PROGRAMS = {
    "chain-core": (lambda: chain("core", 4), lambda s: chain_inputs(s)),
    "chain-export": (lambda: chain("export", 3), lambda s: chain_inputs(s)),
    "program0-core": (lambda: random_program(0, True), program_inputs),
    "program1-export": (lambda: random_program(1, False), program_inputs),
    "demo-fp8-export": (lambda: demo("fp8", False), demo_inputs_for),
}


@pytest.mark.parametrize("name", list(RANDOM_PROGRAMS))
def test_random_local_rules_cut_from_the_program_are_exact(monkeypatch, name):
    build, inputs = RANDOM_PROGRAMS[name]
    program = build()
    paths: Counter = Counter()
    fired = 0
    for seed in range(5):
        rules = random_local_rules(program, seed, k=1 + seed % 4)
        print(f"{name} seed {seed}: {[(r.name, r.priority, r.pattern) for r in rules]}")
        delta, _ = run_both(monkeypatch, program, rules, inputs)
        print(f"  -> {dict(delta)}")
        assert planned(delta) or fell_back(delta), delta
        paths["planned" if planned(delta) else "fallback"] += 1
        monkeypatch.setattr(plan, "ENABLED", False)
        fired += graphfuse.apply(program, rules).report.total
    assert fired > 0  # the cut rules matched somewhere (the comparison saw rewrites)
    assert paths["planned"] > 0, paths


@pytest.fixture(scope="module")
def random_programs():
    return [random_program(0, False), random_program(1, True)]


@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(pats=st.lists(_rooted(), min_size=1, max_size=3), data=st.data())
def test_random_dsl_patterns_as_local_rules_are_exact(monkeypatch, random_programs, pats, data):
    prios = data.draw(st.lists(st.integers(0, 2), min_size=len(pats), max_size=len(pats)))
    rules = RuleSet(
        "random",
        [
            local(f"r{i}", p, stand_in_rewrite(i), tensor_root, priority=prio)
            for i, (p, prio) in enumerate(zip(pats, prios))
        ],
    )
    for program in random_programs:
        delta, _ = run_both(monkeypatch, program, rules, program_inputs)
        assert planned(delta) or fell_back(delta), delta
