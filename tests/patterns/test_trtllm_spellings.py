"""Hand-written attention and quant spellings the ``trtllm`` rule set must recognise
(small fp32 graphs, pre-dispatch and core ATen), each checked against the original."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import graphfuse

from ._numerics import assert_fp8_close

FP8 = torch.float8_e4m3fn
gf = torch.ops.graphfuse
S_O = 0.01


class Fn(nn.Module):
    def __init__(self, fn: object) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Tensor) -> Tensor:
        return self.fn(*args)


def _quant_recip_finfo(x: Tensor, s: Tensor) -> Tensor:
    fi = torch.finfo(FP8)
    return torch.clamp(x * s.reciprocal(), min=fi.min, max=fi.max).to(FP8)


def eager_gqa_masked_fill(q: Tensor, k: Tensor, v: Tensor, s: Tensor) -> Tensor:
    """repeat_interleave GQA, matmul / sqrt(d), masked_fill, softmax in the input dtype."""
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    w = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(q.shape[-1])
    causal = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril()
    w = w.masked_fill(~causal, float("-inf"))
    o = torch.matmul(torch.softmax(w, dim=-1), v)
    return _quant_recip_finfo(o.transpose(1, 2).flatten(2), s)


def bmm_scaled(q: Tensor, k: Tensor, v: Tensor, s: Tensor) -> Tensor:
    """bmm over [B*H] with a multiplied scale, softmax in fp32 with casts, op quant."""
    b, h, n, d = q.shape
    k = k.repeat_interleave(h // k.shape[1], dim=1)
    v = v.repeat_interleave(h // v.shape[1], dim=1)
    w = torch.matmul(q, k.transpose(-1, -2)) * (d**-0.5)
    p = torch.softmax(w.float(), dim=-1).to(q.dtype)
    o = torch.matmul(p, v)
    return gf.fp8_static_quant(o.transpose(1, 2).reshape(b * n, h * d), s)


def sdpa_causal_fp8_inputs(q8: Tensor, k8: Tensor, v: Tensor, s: Tensor) -> Tensor:
    """FP8 q (``.float() * scale``) and k (``graphfuse::fp8_dequant``), is_causal, GQA;
    16-bit output (the transpose after it stays: only quantized outputs take a layout)."""
    q = q8.float() * (s * 4)
    k = gf.fp8_dequant(k8, s * 2, torch.float32)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return o.transpose(1, 2).contiguous()


CASES = {
    "eager_gqa_masked_fill": (eager_gqa_masked_fill, "attention_fp8_out", "bs(hd)"),
    "bmm_scaled": (bmm_scaled, "attention_fp8_out", "(bs)(hd)"),
    "sdpa_causal_fp8_inputs": (sdpa_causal_fp8_inputs, "attention_fp8_inputs", "bhsd"),
}


def _inputs(case: str) -> tuple[Tensor, ...]:
    g = torch.Generator().manual_seed(5)
    q = torch.randn(2, 4, 16, 32, generator=g)
    k = torch.randn(2, 2, 16, 32, generator=g)
    v = torch.randn(2, 2, 16, 32, generator=g)
    if case == "sdpa_causal_fp8_inputs":
        return (q * 20).to(FP8), (k * 40).to(FP8), v, torch.tensor(0.01)
    return q, k, v, torch.tensor([S_O])


@pytest.mark.parametrize("decompose", [False, True], ids=["pre", "core"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_spelling_is_fused(case: str, decompose: bool) -> None:
    fn, rule, layout = CASES[case]
    args = _inputs(case)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        ep = torch.export.export(Fn(fn), args)
    if decompose:
        ep = ep.run_decompositions()
    result = graphfuse.apply(ep, "trtllm")
    assert result.report.counts[rule] == 1, [str(nm) for nm in result.report.near_misses]
    layouts = [n.args[9] for n in result.program.graph.nodes if "attention" in str(n.target)]
    assert layouts == [layout]
    with torch.no_grad():
        want, got = ep.module()(*args), result.program.module()(*args)
    if want.dtype == FP8:
        assert_fp8_close(got, want, S_O)
    else:
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
