"""graphfuse inside torch.compile, in process (FX graph cache off): the Inductor custom
pass and the compile backend fuse the Llama block's attention + FP8 quant, the fused op
runs, outputs agree with eager, and shape changes recompile into fused graphs again."""

from __future__ import annotations

import pytest
import torch
from torch._inductor import config

import graphfuse

from ._compile_model import check_fp8_output, make_input, make_model, run_counted

FUSED = {"attention_fp8_out": 1}


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    with config.patch(fx_graph_cache=False, compile_threads=1):
        yield
    torch._dynamo.reset()


def _fired(report: graphfuse.Report) -> dict[str, int]:
    return {k: v for k, v in report.counts.items() if v}


def _check_run(fn, model, seq: int, seed: int) -> None:
    """Run ``fn`` once (compiling if needed), then again counted: one fused attention op,
    no eager SDPA, output within docs/numerics.md's FP8 tolerance of eager."""
    x = make_input(seq, seed)
    with torch.no_grad():
        fn(x)
    out, ops = run_counted(fn, x)
    assert ops == {"attention_fp8": 1}, f"seq {seq}: graphfuse ops that ran: {dict(ops)}"
    check_fp8_output(model, x, out)


def test_inductor_pass_fuses_with_dynamic_seq_len():
    gpass = graphfuse.inductor_pass()
    model = make_model()
    fn = torch.compile(model)
    x = make_input(8, seed=1)
    torch._dynamo.mark_dynamic(x, 1)
    with config.patch(post_grad_custom_post_pass=gpass), torch.no_grad():
        fn(x)
        assert [_fired(r) for r in gpass.reports] == [FUSED]
        # A symbolic S: other lengths run the same fused graph, without recompiling.
        for seq, seed in ((8, 2), (13, 3)):
            _check_run(fn, model, seq, seed)
    assert len(gpass.reports) == 1


def test_compile_backend_inductor_fuses():
    backend = graphfuse.compile_backend()
    model = make_model(seed=1)
    fn = torch.compile(model, backend=backend)
    _check_run(fn, model, 8, seed=4)
    assert [_fired(r) for r in backend.reports] == [FUSED]
    assert backend.report is backend.reports[-1]


def test_compile_backend_eager_recompiles_fused():
    """The rewritten ATen graph run as is (no C++ compile): a new length recompiles
    (automatic dynamic shapes) and the new graph is fused too."""
    backend = graphfuse.compile_backend(inner="eager")
    model = make_model(seed=2)
    fn = torch.compile(model, backend=backend)
    _check_run(fn, model, 8, seed=5)
    _check_run(fn, model, 11, seed=6)
    _check_run(fn, model, 5, seed=7)
    assert [_fired(r) for r in backend.reports] == [FUSED, FUSED]


@pytest.mark.slow
def test_compile_backend_inductor_recompiles_fused():
    backend = graphfuse.compile_backend()
    model = make_model(seed=3)
    fn = torch.compile(model, backend=backend)
    _check_run(fn, model, 8, seed=8)
    _check_run(fn, model, 12, seed=9)
    assert [_fired(r) for r in backend.reports] == [FUSED, FUSED]


@pytest.mark.slow
def test_inductor_pass_recompiles_fused_with_dynamic_true():
    gpass = graphfuse.inductor_pass()
    model = make_model(seed=4)
    fn = torch.compile(model, dynamic=True)
    with config.patch(post_grad_custom_post_pass=gpass):
        for seq, seed in ((8, 10), (6, 11), (16, 12)):
            _check_run(fn, model, seq, seed)
    assert [_fired(r) for r in gpass.reports] == [FUSED]


def test_grad_mode_call_says_why_nothing_fused():
    """Called without torch.no_grad(), the graph is a training graph: nothing is fused, one
    warning names torch.no_grad(), and the report records why."""
    backend = graphfuse.compile_backend(inner="eager")
    model = make_model(seed=2)
    fn = torch.compile(model, backend=backend)
    with pytest.warns(UserWarning, match=r"torch\.no_grad\(\)") as caught:
        fn(make_input(8, seed=5))
    assert len([w for w in caught if "graphfuse" in str(w.message)]) == 1
    assert backend.report is not None and backend.report.total == 0
    assert "training graph" in backend.report.skipped
    assert "skipped" in str(backend.report)
    assert backend.report.to_dict()["skipped"] == backend.report.skipped


def test_inductor_pass_grad_mode_call_is_reported():
    gpass = graphfuse.inductor_pass()
    model = make_model(seed=3)
    fn = torch.compile(model)
    with config.patch(post_grad_custom_post_pass=gpass):
        with pytest.warns(UserWarning, match=r"torch\.inference_mode\(\)"):
            fn(make_input(8, seed=6))
    assert gpass.reports and all(r.skipped and r.total == 0 for r in gpass.reports)
