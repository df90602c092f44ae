"""torchao 0.18 (``Float8StaticActivationFloat8WeightConfig``, per tensor): its static
activation quant ``x.to(float32) / s[1, 1, 1] -> clamp(-448, 448) -> to(fp8)`` fuses with the
attention before it, on the pre-dispatch program and after ``run_decompositions()``."""

from __future__ import annotations

import pytest
import torch

import graphfuse

from . import _llama as L

L.skip_without("torchao", "transformers")

COUNTS = {"attention_fp8_out": 2, "fp8_static_quant": 13}  # 15 linears, lm_head included


@pytest.mark.parametrize("kind", ["pre", "core"])
def test_torchao_attention_fuses(kind: str) -> None:
    L.assert_fuses("torchao", kind, COUNTS)


def test_torchao_fp32_model_fuses() -> None:
    """In fp32 nothing rounds the attention output to 16 bits before the quant: the fused
    program's logits are the library's but for the rare last bit ``x * (1 / s)`` moves."""
    ep = L.program("torchao", "pre", torch.float32)
    result = L.fused("torchao", "pre", torch.float32)
    assert result.report.counts["attention_fp8_out"] == 2, result.report.near_misses
    for seed in L.SEEDS:
        ids = L.token_ids(seed)
        assert L.rel_l2(L.logits(result.program, ids), L.logits(ep, ids)) <= 1e-3


def test_torchao_e5m2_activations_are_explained() -> None:
    """e5m2 activations do not fuse (the fused ops write e4m3); explain names each quant."""
    model = L.llama()
    L.quantize_torchao(model, fp8=torch.float8_e5m2)
    ep = L.export(model)
    assert graphfuse.apply(ep, "trtllm").report.total == 0
    misses = graphfuse.explain(ep).near_misses
    reasons = {nm.node: nm.reason for nm in misses if nm.rule == "attention_fp8_out"}
    wrong_dtype = {node: r for node, r in reasons.items() if "writes" in r}
    assert len(wrong_dtype) == 2, reasons
    for node, reason in wrong_dtype.items():
        assert reason == (
            f"the quant {node} writes torch.float8_e5m2; the fused ops write torch.float8_e4m3fn"
        )
