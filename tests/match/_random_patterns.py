"""Random patterns for rules (hypothesis strategies): calls of common aten ops over
captures, literals, wildcards, typed captures, alternatives, maybe chains and commutative
calls, two levels deep under a root call; rule sets of them, the fuzz settings, and the
sample programs they run on."""

from __future__ import annotations

import operator

import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from torch import fx

from graphfuse import Rule, RuleSet
from graphfuse import dsl as P
from tests.fuzz._programs import SAMPLE_STEPS, RandomProgram, example_inputs

aten = torch.ops.aten
OPS = [
    aten.add.Tensor,
    aten.mul.Tensor,
    aten.sub.Tensor,
    aten.tanh.default,
    aten.relu.default,
    aten.transpose.int,
    aten.reshape.default,
    aten.view.default,
    aten.softmax,
    aten.div,
    aten.clamp.default,
    aten.to.dtype,
    aten._to_copy.default,
    aten.scaled_dot_product_attention,
    aten.expand.default,
    aten.unsqueeze.default,
    aten.bmm.default,
    aten.matmul.default,
    operator.getitem,
]
LITERALS = [-448, 448, 1, 2, 3, -1, 0.5, None, True, torch.float8_e4m3fn, [0, 2, 1, 3]]


def _patterns(depth: int) -> st.SearchStrategy:
    leaf = st.one_of(
        st.sampled_from(["a", "b", "c"]).map(P.tensor),
        st.sampled_from(["n", "s"]).map(P.scalar),  # (a name is one kind: see test_dsl)
        st.just(P._),
        st.sampled_from(LITERALS).map(P.lit),
        st.sampled_from(["a", "b"]).map(lambda n: P.tensor(n, shape=["B", "S", "X"])),
        st.sampled_from([torch.float32, torch.bfloat16]).map(lambda d: P.tensor("t", dtype=d)),
    )
    if depth == 0:
        return leaf
    sub = _patterns(depth - 1)
    call = st.builds(
        lambda t, args, comm: P.op(t, *args, commutative=comm and len(args) >= 2),
        st.sampled_from(OPS),
        st.lists(sub, min_size=0, max_size=3),
        st.booleans(),
    )
    return st.one_of(
        leaf,
        call,
        st.builds(lambda a, b: a | b, call, sub),
        st.builds(lambda c: P.maybe([aten.view.default, aten.clone.default], c, name="ch"), call),
        st.builds(lambda c: P.typed(c, rank=3), call),
    )


def rooted() -> st.SearchStrategy:
    return st.builds(
        lambda t, args: P.op(t, *args), st.sampled_from(OPS), st.lists(_patterns(2), max_size=3)
    )


def rule_sets() -> st.SearchStrategy:
    """Rule sets of one to three random rooted rules, each rewriting to its root."""
    return st.lists(rooted(), min_size=1, max_size=3).map(
        lambda pats: RuleSet(
            "random", [Rule(f"r{i}", p, lambda m, b: m.root) for i, p in enumerate(pats)]
        )
    )


# the settings of the random-rule tests: seeded, a fixed number of examples, no deadline
FUZZ = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def sample_graphs() -> list[fx.Graph]:
    """Two sample random programs, each exported pre-dispatch and in core ATen."""
    out = []
    for steps in SAMPLE_STEPS[:2]:
        ep = torch.export.export(RandomProgram(steps), example_inputs(0))
        out += [ep.graph_module.graph, ep.run_decompositions().graph_module.graph]
    return out
