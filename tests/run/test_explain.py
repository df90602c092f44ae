"""``explain``: near misses with the failed condition as one sentence, word for word."""

from __future__ import annotations

import pytest
import torch

import graphfuse
from graphfuse import dsl as P
from tests._models import aten, export, graph_code, probe, rules

F8 = torch.float8_e4m3fn


def _quant(x, s, lo=-448, hi=448):
    return (x / s).clamp(lo, hi).to(F8)


class _Model(torch.nn.Module):
    def forward(self, x, s, s2):
        y = x / s
        return (
            _quant(x, s),  # fires
            _quant(x, s2),  # the scale is [1, 64]: check message
            _quant(x, s, -400, 400),  # wrong literal
            _quant(x.to(torch.bfloat16), s),  # dtype
            (x * s).clamp(-448, 448).to(F8),  # wrong target
            y.clamp(-448, 448).to(F8),  # escape: y is an output too
            y,
        )


QUANT = P.op(
    aten.to.dtype,
    P.op(
        aten.clamp,
        P.op(aten.div.Tensor, P.tensor("x", dtype=torch.float32), P.tensor("s")),
        -448,
        448,
    ),
    F8,
)
FP8 = probe(QUANT, check=lambda m: m.single_element("s"), name="fp8_quant")


@pytest.fixture(scope="module")
def ep():
    return export(_Model(), (torch.randn(8, 64), torch.tensor(2.0), torch.rand(1, 64) + 1))


def test_explain_sentences(ep):
    before = graph_code(ep)
    report = graphfuse.explain(ep, rules(FP8))
    assert graph_code(ep) == before
    assert report.counts == {"fp8_quant": 1} and report.dry_run
    assert sorted(str(nm) for nm in report.near_misses) == sorted(
        [
            "rule fp8_quant at div_2: the scale s2 has shape [1, 64]; the rule needs a single "
            "element",
            "rule fp8_quant at clamp_2: argument 'min' of clamp_2 is -400; the pattern needs -448",
            "rule fp8_quant at to_3: to_3 has dtype torch.bfloat16; the pattern needs "
            "torch.float32",
            "rule fp8_quant at mul: mul (aten.mul.Tensor) is not a call of aten.div.Tensor",
            "rule fp8_quant at div: div (aten.div.Tensor) is also used by the graph's output "
            "outside the match",
        ]
    )


def test_near_miss_fields(ep):
    report = graphfuse.explain(ep, rules(FP8))
    (nm,) = [n for n in report.near_misses if n.node == "mul"]
    assert nm.rule == "fp8_quant" and nm.target == "aten.mul.Tensor"
    assert nm.source_line().startswith(f'File "{__file__}", line ')
    assert nm.source_line().endswith("(x * s).clamp(-448, 448).to(F8),  # wrong target")
    d = report.to_dict()["near_misses"]
    fields = {"rule": "fp8_quant", "node": "mul", "reason": str(nm.reason), "target": nm.target}
    assert fields | {"refused": False, "depth": 2} in d  # the pattern got 2 ops deep


def test_near_misses_rank_refusals_first_then_depth(ep):
    """explain lists a whole match its check or an escape refused before partial matches,
    deeper partial matches before shallower ones."""
    misses = graphfuse.explain(ep, rules(FP8), min_depth=1).near_misses
    keys = [(not m.refused, -m.depth) for m in misses if not m.reason.startswith("inside")]
    assert keys == sorted(keys) and keys[0][0] is False and len({k[1] for k in keys}) > 1


def test_min_depth_filters_shallow_misses(ep):
    shallow = graphfuse.explain(ep, rules(FP8), min_depth=1).near_misses
    deep = graphfuse.explain(ep, rules(FP8)).near_misses
    assert len(shallow) > len(deep) == 5
    # the cast x.to(bfloat16) is a to.dtype whose argument is not a clamp (depth 1)
    assert (
        "rule fp8_quant at to_3: argument 'self' of to_3 is x (a placeholder); the pattern "
        "needs a call of aten.clamp" in [str(n) for n in shallow]
    )


def test_check_results_as_reasons(ep):
    def say(result):
        return [
            str(n) for n in graphfuse.explain(ep, rules(probe(QUANT, lambda m: result))).near_misses
        ]

    assert "rule probe at to: the rule's check returned False" in say(False)
    assert "rule probe at to: x is too small" in say("x is too small")


def test_fail_template_is_formatted_lazily(ep):
    def check(m):
        return m.fail("{who} has {n} elements", node="x", who=m["x"].name, n=m.val("x").numel())

    got = [str(n) for n in graphfuse.explain(ep, rules(probe(QUANT, check))).near_misses]
    assert "rule probe at x: x has 512 elements" in got


def test_rank_kind_and_dim_failures():
    ep = export(lambda x, y: torch.relu(x @ y), (torch.randn(4, 3), torch.randn(3, 5)))
    a, b = P.tensor("a", shape=["M", "K"]), P.tensor("b", shape=["K", "N"])
    mm = lambda x, y: P.op(aten.relu, P.op(aten.matmul, x, y))  # noqa: E731
    say = lambda pat, check=None: [
        str(n) for n in graphfuse.explain(ep, rules(probe(pat, check))).near_misses
    ]  # noqa: E731
    assert say(mm(a, b)) == []
    assert say(mm(P.tensor("a", rank=3), b)) == [
        "rule probe at x: x has rank 2; the pattern needs rank 3"
    ]
    assert say(mm(P.tensor("a", shape=["M", 8]), b)) == [
        "rule probe at x: x has a dim of size 3; the pattern needs 8"
    ]
    assert say(mm(a, P.tensor("b", shape=["M", "N"]))) == [
        "rule probe at y: y has M = 3, but M = 4 elsewhere in the match"
    ]
    assert say(mm(a, P.scalar("b"))) == [
        "rule probe at matmul: b is y (a placeholder), not a scalar"
    ]
    assert say(mm(a, b), lambda m: m.require("K % 2 == 0")) == [
        "rule probe at relu: K % 2 == 0 does not hold (K = 3)"
    ]
