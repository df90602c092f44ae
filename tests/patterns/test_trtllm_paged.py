"""trtllm fuses paged decode attention with a following static FP8 / NVFP4 quant."""

from __future__ import annotations

import pytest
import torch

import graphfuse
from graphfuse.ops.paged_ref import paged_decode_fp32
from graphfuse.ops.quant_ref import fp8_static_quant_ref, nvfp4_quant_ref
from graphfuse.testing.numerics import assert_fp8_close, assert_nvfp4_close

FP8 = torch.float8_e4m3fn
gf = torch.ops.graphfuse
B, HQ, HKV, D, BS, NB = 3, 8, 2, 64, 16, 12


class PagedDecode(torch.nn.Module):
    """A decode step over an FP8 paged KV cache, its output quantized for o_proj."""

    def __init__(self, out: str) -> None:
        super().__init__()
        self.out = out
        self.register_buffer("k_scale", torch.tensor(0.05))
        self.register_buffer("v_scale", torch.tensor(0.04))
        self.register_buffer("out_scale", torch.tensor(0.2 / 448))
        self.register_buffer("g", torch.tensor(448 * 6 / 0.2))

    def forward(self, q, cache, tables, lens):
        o = gf.paged_decode_attention(
            q, cache, tables, lens, None, self.k_scale, self.v_scale, None, torch.bfloat16
        )
        o = o.reshape(q.shape[0], -1)
        if self.out == "fp8":
            return (o.float() / self.out_scale).clamp(-448, 448).to(FP8)
        return gf.nvfp4_quant(o, self.g)


def _inputs(seed: int):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, HQ, D, generator=g).to(torch.bfloat16)
    cache = (torch.randn(NB, 2, BS, HKV, D, generator=g) * 4).to(FP8)
    tables = torch.randperm(NB, generator=g)[: B * 4].reshape(B, 4).to(torch.int32)
    lens = torch.tensor([37, 64, 5], dtype=torch.int32)
    return q, cache, tables, lens


@pytest.mark.parametrize("out", ["fp8", "nvfp4"])
@pytest.mark.parametrize("decompose", [False, True], ids=["pre_dispatch", "core_aten"])
def test_paged_decode_quant_fuses(out, decompose):
    model = PagedDecode(out)
    ep = torch.export.export(model, _inputs(0))
    if decompose:
        ep = ep.run_decompositions()
    res = graphfuse.apply(ep, "trtllm")
    rule = f"paged_decode_{out}_out"
    assert res.report.counts[rule] == 1, res.report
    res.program.graph_module.graph.lint()
    targets = {str(n.target) for n in res.program.graph.nodes if n.op == "call_function"}
    assert f"graphfuse.paged_decode_attention_{out}.default" in targets
    assert "graphfuse.paged_decode_attention.default" not in targets

    args = _inputs(1)
    wide = paged_decode_fp32(
        args[0], args[1], args[2], args[3], k_scale=model.k_scale, v_scale=model.v_scale
    ).reshape(B, -1)
    got = res.program.module()(*args)
    if out == "fp8":
        assert_fp8_close(got, fp8_static_quant_ref(wide, model.out_scale), wide, model.out_scale)
    else:
        ref = nvfp4_quant_ref(wide, model.g)
        assert_nvfp4_close(got[0], got[1], ref[0], ref[1], wide, model.g)
