"""An exported Llama-style model fused by trtllm runs on the GPU, also under CUDA-graph
capture, with outputs within tolerance of the unfused program."""

from __future__ import annotations

import pytest
import torch

import graphfuse
from graphfuse.demo import DemoDecoder, demo_inputs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


@pytest.mark.parametrize("out_format", ["fp8", "nvfp4"])
def test_fused_decoder_on_gpu_and_under_cuda_graphs(out_format):
    torch.manual_seed(0)
    model = DemoDecoder(2, 512, 8, 2, out_format).to(torch.bfloat16).eval().cuda()
    args = tuple(a.cuda() for a in demo_inputs(2, 128, 512, 64, torch.bfloat16))
    ep = torch.export.export(model, args)  # on CUDA: export records devices in asserts
    res = graphfuse.apply(ep, "trtllm")
    assert res.report.counts[f"attention_{out_format}_out"] == 2
    fused, plain = res.program.module(), ep.module()
    fresh = [a.cuda() for a in demo_inputs(2, 128, 512, 64, torch.bfloat16)]
    with torch.no_grad():
        ref = plain(*fresh).float()
        out = fused(*fresh).float()
        rel = ((out - ref).norm() / ref.norm()).item()
        assert rel < 0.02, f"fused vs unfused on GPU: relative error {rel:.4f}"

        static = [a.clone() for a in fresh]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fused(*static)  # warm up (Triton compiles outside the capture)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = fused(*static)
        new = [a.cuda() for a in demo_inputs(2, 128, 512, 64, torch.bfloat16)]
        for s, n in zip(static, new):
            s.copy_(n)
        graph.replay()
        torch.cuda.synchronize()
        expect = plain(*new).float()
        rel = ((captured.float() - expect).norm() / expect.norm()).item()
        assert rel < 0.02, f"CUDA-graph replay vs unfused: relative error {rel:.4f}"
