"""Write a rule with the DSL: fuse the FP8 static-quant spelling
``(x / s).clamp(-448, 448).to(torch.float8_e4m3fn)`` into one (tiny, example-only) custom op.

Run: python examples/write_a_rule.py
"""

import torch

import graphfuse
from graphfuse import dsl as P

aten, F8 = torch.ops.aten, torch.float8_e4m3fn


@torch.library.custom_op("example::fp8_quant", mutates_args=())
def fp8_quant(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return (x / s).clamp(-448, 448).to(F8)


@fp8_quant.register_fake
def _(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x, dtype=F8)


x, s = P.tensor("x", dtype=torch.float32), P.tensor("s")
quant = P.op(
    {aten.to.dtype, aten._to_copy.default},  # pre-dispatch / decomposed spelling of .to()
    P.op(aten.clamp, P.op(aten.div.Tensor, x, s), -448, 448),
    dtype=F8,
)
RULES = graphfuse.RuleSet(
    "example",
    [
        graphfuse.Rule(
            "fp8_quant",
            pattern=quant,
            check=lambda m: m.single_element("s"),
            rewrite=lambda m, b: b.call(torch.ops.example.fp8_quant.default, m["x"], m["s"]),
        )
    ],
)


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return (torch.relu(x) / s).clamp(-448, 448).to(F8)


if __name__ == "__main__":
    args = (torch.randn(4, 64) * 100, torch.tensor(0.5))
    ep = torch.export.export(Model(), args)
    result = graphfuse.apply(ep, RULES)
    print(result.report)
    print("before:", ep.graph, "after:", result.program.graph, sep="\n")
    new = (torch.randn(4, 64) * 100, torch.tensor(0.25))  # fresh inputs
    want, got = ep.module()(*new), result.program.module()(*new)
    assert result.report.counts == {"fp8_quant": 1}
    torch.testing.assert_close(got.float(), want.float(), rtol=0, atol=0)
    print("outputs agree")
