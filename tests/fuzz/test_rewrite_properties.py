"""Property-based tests: random programs with planted attention -> FP8-quant blocks, near
misses and distractors. Invariants: the rewritten graph lints and is acyclic, has no
dangling nodes, computes the same outputs within docs/numerics.md tolerance; a block is fused
exactly when it is eligible; apply is idempotent and deterministic."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings

import graphfuse
from graphfuse.testing import assert_outputs_close
from tests.fuzz._programs import FP8, AttnStep, RandomProgram, example_inputs, steps_strategy

FUSED = torch.ops.graphfuse.attention_fp8.default
SETTINGS = settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _export(steps, decompose: bool) -> torch.export.ExportedProgram:
    ep = torch.export.export(RandomProgram(steps), example_inputs(0))
    return ep.run_decompositions() if decompose else ep


def _dangling(gm: torch.fx.GraphModule) -> set[str]:
    return {
        n.name
        for n in gm.graph.nodes
        if n.op == "call_function" and not n.users and "assert" not in str(n.target)
    }


@pytest.mark.parametrize("decompose", [False, True], ids=["pre_dispatch", "core_aten"])
@SETTINGS
@given(steps=steps_strategy(max_steps=4))
def test_rewrite_invariants(steps, decompose):
    _check_invariants(steps, decompose)


@pytest.mark.slow
@pytest.mark.parametrize("decompose", [False, True], ids=["pre_dispatch", "core_aten"])
@settings(SETTINGS, max_examples=100)
@given(steps=steps_strategy(max_steps=6))
def test_rewrite_invariants_many(steps, decompose):
    _check_invariants(steps, decompose)


def _check_invariants(steps, decompose):
    ep = _export(steps, decompose)
    code_before = ep.graph_module.code
    result = graphfuse.apply(ep, "trtllm")
    gm = result.program.graph_module
    assert ep.graph_module.code == code_before, "apply mutated its input"
    gm.graph.lint()  # topological order = acyclic; every input defined before use
    assert _dangling(gm) <= _dangling(ep.graph_module), "the rewrite left dangling nodes"

    eligible = sum(isinstance(s, AttnStep) and s.eligible for s in steps)
    fused = len(gm.graph.find_nodes(op="call_function", target=FUSED))
    assert fused == eligible, f"fused {fused} of {eligible} eligible blocks: {steps}"
    for step in steps:
        if isinstance(step, AttnStep) and step.near_miss in ("extra_user", "per_channel_scale"):
            assert result.report.near_misses, "an ineligible block left no near miss"

    args = example_inputs(1)
    torch.manual_seed(0)
    ref = ep.module()(*args)
    torch.manual_seed(0)
    out = result.program.module()(*args)
    for r, o in zip(ref, out, strict=True):
        if r.dtype == FP8:
            assert_outputs_close(o, r, min_equal=0.99)  # one e4m3 step, 99% bytes equal
        else:
            rel = ((o - r).norm() / r.norm().clamp_min(1e-6)).item()
            assert rel < 0.05, f"float output off by {rel:.3g} (relative L2)"

    again = graphfuse.apply(result.program, "trtllm")
    assert again.report.total == 0, "a second apply changed something"
    assert again.program.graph_module.code == gm.code

    twice = graphfuse.apply(ep, "trtllm")
    assert twice.program.graph_module.code == gm.code, "apply is not deterministic"


def test_saved_program_is_deterministic(tmp_path):
    steps = [
        AttnStep(0, "sdpa", "repeat_kv", "bool", "bs(hd)", "div", "none"),
        AttnStep(2, "hand", "interleave", "causal", "bhsd", "mul_recip", "none"),
    ]
    ep = _export(steps, False)
    paths = []
    for i in range(2):
        res = graphfuse.apply(ep, "trtllm")
        assert res.report.total == 2
        (tmp_path / str(i)).mkdir()
        paths.append(tmp_path / str(i) / "fused.pt2")  # the archive embeds the file name
        torch.export.save(res.program, paths[-1])
    assert paths[0].read_bytes() == paths[1].read_bytes()
