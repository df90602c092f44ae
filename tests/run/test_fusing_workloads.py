"""Whole workloads through ``apply``: the matcher benchmark's chain in three IRs, the demo
decoder (exported, decomposed, unlifted) and the fuzz suite's sample programs with the
bundled ``trtllm`` rules. Each is fused where it should be, leaves its input untouched,
lints, and computes what the unrewritten program computes on fresh inputs (within
docs/numerics.md's FP8 tolerance); a standalone quant's rewrite brings a full second sweep,
because it creates an op that a pattern of the set names."""

from __future__ import annotations

import pytest
import torch
from torch.utils._pytree import tree_flatten

import graphfuse
from graphfuse.io import graph_module_of
from graphfuse.ops.quant_ref import fp8_static_quant_ref
from graphfuse.run import sweep_order
from graphfuse.testing import assert_fp8_close, assert_outputs_close
from tests._chain import SCALE, B, D, H, S, chain_inputs

from ._workloads import (
    chain,
    chain_rules,
    check_graph,
    demo,
    demo_inputs_for,
    fingerprint,
    program_inputs,
    random_program,
    run_seeded,
)

FP8 = torch.float8_e4m3fn
FUSED = torch.ops.graphfuse.attention_fp8.default


@pytest.fixture(scope="module")
def fused_chains():
    out = {}
    for ir in ("export", "core", "inductor"):
        gm = chain(ir, 6)
        before = fingerprint(gm)
        res = graphfuse.apply(gm, chain_rules(ir))
        assert fingerprint(gm) == before, "apply mutated its input"
        out[ir] = (gm, res)
    return out


@pytest.mark.parametrize("ir", ["export", "core", "inductor"])
def test_the_benchmark_chain_fuses_every_block(fused_chains, ir):
    gm, res = fused_chains[ir]
    assert res.report.total == 6, res.report.counts
    check_graph(res.program.graph)
    assert len(res.program.graph.find_nodes(op="call_function", target=FUSED)) == 6
    assert not res.program.graph.find_nodes(op="call_function", target=torch.ops.aten.clamp.default)
    out = run_seeded(res.program, chain_inputs(1))
    assert out.shape == (B, H, S, D) and out.dtype == torch.bfloat16


@pytest.mark.parametrize("ir", ["export", "core", "inductor"])
def test_a_fused_block_meets_the_fp8_acceptance(ir):
    """One link (block + cast): the fused output by docs/numerics.md's FP8-out acceptance,
    against the reference quantizer applied to the attention computed in fp32 (CPU kernel:
    99% of the codes equal)."""
    gm = chain(ir, 1)
    res = graphfuse.apply(gm, chain_rules(ir))
    assert res.report.total == 1
    for seed in (1, 2):
        x, k, v, s = xs = chain_inputs(seed)
        # each link ends in the block's FP8 output cast back to bf16: exact FP8 codes
        out = run_seeded(res.program, xs).to(FP8)
        wide = torch.softmax(x.float() @ k.float().transpose(2, 3) * SCALE, -1) @ v.float()
        assert_fp8_close(out, fp8_static_quant_ref(wide, s), wide, s)


def test_the_chain_fused_from_any_ir_computes_the_same(fused_chains):
    """The three IRs spell the block differently; fused, they are the same calls."""
    for seed in (1, 2):
        xs = chain_inputs(seed)
        outs = [run_seeded(res.program, xs) for _, res in fused_chains.values()]
        assert all(torch.equal(o.view(torch.int16), outs[0].view(torch.int16)) for o in outs)


# (program, inputs, rewrites of the bundled rules)
MODEL_CASES = {
    "demo-fp8-export": (lambda: demo("fp8", False), demo_inputs_for, {"attention_fp8_out": 2}),
    "demo-fp8-core": (lambda: demo("fp8", True), demo_inputs_for, {"attention_fp8_out": 2}),
    "demo-nvfp4-export": (
        lambda: demo("nvfp4", False),
        demo_inputs_for,
        {"attention_nvfp4_out": 2},
    ),
    # an unlifted GraphModule (get_attr parameters and buffers) rather than a program
    "demo-fp8-module": (
        lambda: demo("fp8", False).module(),
        demo_inputs_for,
        {"attention_fp8_out": 2},
    ),
    "program1-export": (lambda: random_program(1, False), program_inputs, {"attention_fp8_out": 2}),
    "program1-core": (lambda: random_program(1, True), program_inputs, {"attention_fp8_out": 2}),
    # a quant that no attention absorbs (an extra user, dropout): fp8_static_quant fires
    **{
        f"program{i}-{ir}": (
            lambda i=i, ir=ir: random_program(i, ir == "core"),
            program_inputs,
            {"attention_fp8_out": 1, "fp8_static_quant": 1},
        )
        for i in (0, 2)
        for ir in ("export", "core")
    },
}


@pytest.mark.parametrize("case", list(MODEL_CASES))
def test_models_fuse_with_the_bundled_rules(case):
    build, inputs, expect = MODEL_CASES[case]
    program = build()
    before = fingerprint(program)
    calls: list[tuple[int, int]] = []
    res = graphfuse.apply(
        program, "trtllm", progress=lambda done, total: calls.append((done, total))
    )
    assert fingerprint(program) == before, "apply mutated its input"
    kind = torch.export.ExportedProgram if "module" not in case else torch.fx.GraphModule
    assert isinstance(program, kind) and isinstance(res.program, kind)
    assert res.program is not program
    assert {k: v for k, v in res.report.counts.items() if v} == expect
    graph = graph_module_of(res.program).graph
    check_graph(graph)
    if isinstance(res.program, torch.export.ExportedProgram):
        res.program.validate()
    # sweep 2 fired nothing, so the result's graph is the graph it swept
    sweeps = [total for done, total in calls if done == total]
    assert len(sweeps) == 2 and res.report.iterations == 2
    everything = len(sweep_order(graphfuse.load_patterns("trtllm"), graph))
    if "fp8_static_quant" in expect:  # it created graphfuse.fp8_static_quant: a full sweep
        assert sweeps[1] == everything > 0
    else:  # only what escaped is retried
        assert sweeps[1] < everything
    for seed in (1, 2):
        xs = inputs(seed)
        with torch.no_grad():
            _assert_agrees(run_seeded(res.program, xs), run_seeded(program, xs))


def _assert_agrees(out, ref) -> None:
    """FP8 outputs: every byte within one e4m3 step, 99% equal; float outputs (the demo's
    hidden states after the fused attention and o_proj): within 2% relative L2."""
    outs, refs = tree_flatten(out)[0], tree_flatten(ref)[0]
    assert len(outs) == len(refs)
    for o, r in zip(outs, refs):
        assert (o.dtype, o.shape) == (r.dtype, r.shape)
        if r.dtype == FP8 or not r.is_floating_point():
            assert_outputs_close(o, r)
        else:
            rel = ((o.float() - r.float()).norm() / r.float().norm().clamp_min(1e-6)).item()
            assert rel < 0.02, f"float output off by {rel:.3g} (relative L2)"
