"""What docs/dsl.md says about literals and reused names, checked on a real export."""

from __future__ import annotations

import math

import pytest
import torch

import graphfuse
from graphfuse import dsl as P
from graphfuse.match import Match, match_rule

aten = torch.ops.aten
CASTS = [aten.to.dtype, aten._to_copy.default, aten.clone.default]


class _Model(torch.nn.Module):
    def forward(self, a, b):
        return (
            a.float().clone() + b.float(),
            a * 0.125,
            a * 0.12500001,
            a * 2.0,
            a * 2,
            a * (1 / math.sqrt(96)),
        )


@pytest.fixture(scope="module")
def nodes() -> dict[str, torch.fx.Node]:
    args = (torch.randn(4, dtype=torch.bfloat16), torch.randn(4, dtype=torch.bfloat16))
    ep = torch.export.export(_Model(), args)
    return {n.name: n for n in ep.graph.nodes}


def _matches(pattern: P.Pattern, node: torch.fx.Node) -> Match | None:
    res = match_rule(graphfuse.Rule("r", pattern, lambda m, b: m.root), node)
    return res if isinstance(res, Match) else None


def test_float_literals_match_exactly(nodes) -> None:
    muls = [n for n in nodes.values() if n.target is aten.mul.Tensor]
    assert [n.args[1] for n in muls] == [0.125, 0.12500001, 2.0, 2, 0.10206207261596577]

    def hits(lit: object) -> list[object]:
        return [n.args[1] for n in muls if _matches(P.op(aten.mul.Tensor, P._, lit), n)]

    assert hits(0.125) == [0.125]
    assert hits(2) == hits(2.0) == [2.0, 2]
    assert hits(0.10206207) == []


def test_a_named_maybe_used_twice_keeps_the_last_chain(nodes) -> None:
    up = P.maybe(CASTS, P.tensor("x"), name="upcast")
    shared = _matches(
        P.op(
            aten.add.Tensor,
            P.maybe(CASTS, P.tensor("a"), name="upcast"),
            P.maybe(CASTS, P.tensor("b"), name="upcast"),
        ),
        nodes["add"],
    )
    assert shared is not None and [n.name for n in shared.chain("upcast")] == ["to_1"]
    assert shared["a"] is nodes["a"] and shared["b"] is nodes["b"]
    assert {"to", "clone", "to_1"} <= {n.name for n in shared.nodes}
    assert _matches(P.op(aten.add.Tensor, up, up), nodes["add"]) is None  # x: a and b

    def upcast(x: P.Pattern, name: str) -> P.Pattern:
        return P.maybe(CASTS, x, name=f"{name}_cast")

    own = _matches(
        P.op(aten.add.Tensor, upcast(P.tensor("a"), "a"), upcast(P.tensor("b"), "b")),
        nodes["add"],
    )
    assert own is not None
    assert [n.name for n in own.chain("a_cast")] == ["clone", "to"]
    assert [n.name for n in own.chain("b_cast")] == ["to_1"]
