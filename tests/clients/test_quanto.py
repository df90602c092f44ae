"""optimum-quanto 0.2.7 (``qfloat8`` activations, calibrated, frozen): its opaque
``quanto::quantize_symmetric(x, float8_e4m3fn, None, s)`` fuses with the attention before
it, on both IRs (the op survives ``run_decompositions()``)."""

from __future__ import annotations

import pytest

import graphfuse

from . import _llama as L

L.skip_without("optimum.quanto", "transformers")

COUNTS = {"attention_fp8_out": 2}  # quanto's other quants stay its own op


@pytest.mark.parametrize("kind", ["pre", "core"])
def test_quanto_attention_fuses(kind: str) -> None:
    L.assert_fuses("quanto", kind, COUNTS)


def test_quanto_e5m2_activations_are_explained() -> None:
    model = L.llama()
    L.quantize_quanto(model, activations="qfloat8_e5m2")
    ep = L.export(model)
    assert graphfuse.apply(ep, "trtllm").report.total == 0
    misses = graphfuse.explain(ep).near_misses
    reasons = [nm.reason for nm in misses if nm.rule == "attention_fp8_out"]
    want = "writes torch.float8_e5m2; the fused ops write torch.float8_e4m3fn"
    assert len(reasons) == 2 and all(r.endswith(want) for r in reasons), reasons
