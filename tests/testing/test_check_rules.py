"""graphfuse.testing.check_rules: passes on a correct fusion, fails loudly on a wrong one."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import graphfuse
from graphfuse import dsl as P
from graphfuse.testing import assert_outputs_close, check_rules

FP8 = torch.float8_e4m3fn


class Attn(torch.nn.Module):
    def forward(self, q, k, v, s):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return (o.transpose(1, 2).reshape(2, 16, -1).float() / s).clamp(-448, 448).to(FP8)


def _args():
    return (
        torch.randn(2, 4, 16, 32),
        torch.randn(2, 4, 16, 32),
        torch.randn(2, 4, 16, 32),
        torch.tensor(2.0 / 448),
    )


@pytest.mark.parametrize("decompose", [False, True])
def test_check_rules_on_the_bundled_fusion(decompose):
    res = check_rules(
        Attn(), _args(), "trtllm", expect={"attention_fp8_out": 1}, decompose=decompose
    )
    assert res.report.counts["attention_fp8_out"] == 1


def test_check_rules_reports_unexpected_counts():
    with pytest.raises(AssertionError, match=r"rewrites \{'attention_fp8_out': 1\}, expected"):
        check_rules(Attn(), _args(), "trtllm", expect={"attention_fp8_out": 2})


def test_check_rules_catches_a_wrong_rewrite():
    aten = torch.ops.aten
    wrong = graphfuse.Rule(
        "wrong",
        P.op(aten.tanh.default, P.tensor("x")),
        lambda m, b: b.call(aten.sigmoid.default, m["x"]),
    )

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.tanh(x)

    with pytest.raises(AssertionError):
        check_rules(M(), (torch.randn(8, 8),), graphfuse.RuleSet("w", [wrong]))


def test_fp8_outputs_one_step_apart_pass_two_steps_fail():
    x = torch.randn(1000).abs().to(FP8)  # positive: byte + 1 is the next code up
    one = (x.view(torch.uint8).to(torch.int16) + (torch.arange(1000) % 100 == 0)).clamp(0, 0x7E)
    assert_outputs_close(one.to(torch.uint8).view(FP8), x, min_equal=0.9)
    two = x.view(torch.uint8).clone()
    two[0] = (two[0].to(torch.int16) + 2).clamp(max=0x7E).to(torch.uint8)
    with pytest.raises(AssertionError, match="off by > 1 step"):
        assert_outputs_close(two.view(FP8), x)
