"""Authoring a rule, start to finish: write it, see it miss, explain the miss, fix it,
test it.

The model computes GELU with the tanh approximation by hand; the rule fuses it into
``aten.gelu(x, approximate="tanh")``. The first version of the rule only knows one
spelling, so it misses the model's; ``graphfuse.explain`` says why, the fixed rule adds
the other spelling as a tagged alternative, and ``graphfuse.testing.check_rules`` checks
counts and numerics on fresh inputs.

Run: ``python examples/authoring_walkthrough.py``
"""

from __future__ import annotations

import math

import torch

import graphfuse
from graphfuse import dsl as P
from graphfuse.testing import check_rules

aten = torch.ops.aten
C = math.sqrt(2.0 / math.pi)


class TanhGelu(torch.nn.Module):
    """How many model files write it: 0.5 * x * (1 + tanh(c * (x + 0.044715 * x**3)))."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inner = C * (x + 0.044715 * torch.pow(x, 3))
        return 0.5 * x * (1.0 + torch.tanh(inner))


def gelu_rule(cube: P.Pattern) -> graphfuse.Rule:
    x = P.tensor("x")
    inner = P.op(aten.mul.Tensor, P.op(aten.add.Tensor, x, cube), C, commutative=True)
    one_plus = P.op(aten.add.Tensor, P.op(aten.tanh.default, inner), 1.0, commutative=True)
    half_x = P.op(aten.mul.Tensor, x, 0.5, commutative=True)
    pattern = P.op(aten.mul.Tensor, half_x, one_plus)
    return graphfuse.Rule(
        "tanh_gelu",
        pattern,
        lambda m, b: b.call(aten.gelu.default, m["x"], approximate="tanh"),
        doc="hand-written tanh GELU -> aten.gelu(approximate='tanh')",
    )


def main() -> None:
    x = torch.randn(4, 64)
    ep = torch.export.export(TanhGelu(), (x,))

    # 1. A first rule that only knows x * x * x for the cube.
    xx = P.tensor("x")
    naive_cube = P.op(
        aten.mul.Tensor,
        P.op(aten.mul.Tensor, P.op(aten.mul.Tensor, xx, xx), xx),
        0.044715,
        commutative=True,
    )
    first = graphfuse.RuleSet("gelu_v1", [gelu_rule(naive_cube)])
    result = graphfuse.apply(ep, first)
    print("v1 rewrites:", result.report.counts)
    assert result.report.total == 0, "v1 should miss the pow spelling"

    # 2. Ask why.
    for miss in graphfuse.explain(ep, first).near_misses:
        print("  near miss:", miss)

    # 3. Fix: the cube is x ** 3 (pow) in this model; keep both spellings, tagged.
    x_cap = P.tensor("x")
    cube = P.op(
        aten.mul.Tensor,
        P.alt(
            "cube",
            pow=P.op(aten.pow.Tensor_Scalar, x_cap, 3),
            muls=P.op(aten.mul.Tensor, P.op(aten.mul.Tensor, x_cap, x_cap), x_cap),
        ),
        0.044715,
        commutative=True,
    )
    fixed = graphfuse.RuleSet("gelu_v2", [gelu_rule(cube)])

    # 4. Test it: counts, lint, numerics on fresh inputs, both IRs.
    for decompose in (False, True):
        res = check_rules(
            TanhGelu(),
            (x,),
            fixed,
            expect={"tanh_gelu": 1},
            decompose=decompose,
            rtol=1e-5,
            atol=1e-5,
        )
        ops = [str(n.target) for n in res.program.graph.nodes if n.op == "call_function"]
        print(f"v2 ({'core ATen' if decompose else 'pre-dispatch'}):", res.report.counts, ops)


if __name__ == "__main__":
    main()
