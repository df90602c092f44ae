"""compressed-tensors 0.20 (the ``FP8`` preset, static per-tensor W8A8, as a checkpoint
loads): its fake quant ``x / s[1] -> clamp.Tensor(lo, hi) -> to(fp8) -> to(bf16) * s`` whose
clamp bounds are lifted constant tensors fuses with the attention before it (the dequant
stays), on both IRs; exported without ``torch.no_grad()`` the quants sit in
``wrap_with_set_grad_enabled`` subgraphs, which explain reports with the fix."""

from __future__ import annotations

import pytest

import graphfuse

from . import _llama as L

L.skip_without("compressed_tensors", "transformers")

COUNTS = {"attention_fp8_out": 2, "fp8_static_quant": 12}  # 14 linears, lm_head ignored


@pytest.mark.parametrize("kind", ["pre", "core"])
def test_compressed_tensors_attention_fuses(kind: str) -> None:
    L.assert_fuses("compressed_tensors", kind, COUNTS)


def test_quants_inside_no_grad_blocks_are_explained() -> None:
    """Exported with gradients on, every quant is inside a ``wrap_with_set_grad_enabled``
    subgraph: nothing fuses, and explain says where and how to export instead. After
    ``run_decompositions()`` those subgraphs are inlined and everything fuses."""
    model = L.llama()
    L.quantize_compressed_tensors(model)
    ep = L.export(model, no_grad=False)
    assert graphfuse.apply(ep, "trtllm").report.total == 0
    hidden = [nm for nm in graphfuse.explain(ep).near_misses if "inside" in nm.reason]
    assert len(hidden) == 14, [str(nm) for nm in hidden]
    fix = (
        "; graphfuse does not rewrite inside higher-order ops: "
        "export under torch.no_grad() so that no-grad blocks stay inline"
    )
    for nm in hidden:
        assert nm.rule == "fp8_static_quant", str(nm)
        assert nm.target == "higher_order.wrap_with_set_grad_enabled", nm.target
        assert "(torch.ops.higher_order.wrap_with_set_grad_enabled, subgraph submod_" in nm.reason
        assert nm.reason.endswith(fix), nm.reason
    core = graphfuse.apply(ep.run_decompositions(), "trtllm").report.counts
    assert {k: v for k, v in core.items() if v} == COUNTS


def test_clamp_bounds_are_read_from_the_program() -> None:
    """The bounds are constants of the program, not of the graph: graphfuse reads them from
    ``ExportedProgram.constants``, so a graph without its program cannot fuse them."""
    ep = L.program("compressed_tensors", "core")
    alone = graphfuse.apply(ep.graph_module, "trtllm")  # the GraphModule, constants lost
    assert alone.report.total == 0
    reasons = [nm.reason for nm in alone.report.near_misses if nm.rule == "attention_fp8_out"]
    assert reasons and all("is a tensor whose value is not a constant" in r for r in reasons)
