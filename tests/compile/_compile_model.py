"""A small Llama-style attention block for the torch.compile tests, a counter of the
graphfuse ops that run, and the docs/numerics.md FP8-output acceptance check."""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.profiler import ProfilerActivity

from graphfuse.testing.numerics import assert_fp8_close

FP8 = torch.float8_e4m3fn


def rms_norm(x: Tensor, w: Tensor, eps: float = 1e-6) -> Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x: Tensor, pos: Tensor) -> Tensor:
    """Rotary embedding on [B, H, S, D] (rotate-half form)."""
    d = x.shape[-1]
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32, device=x.device) / d))
    ang = pos[:, None].float() * inv[None, :]
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """HF transformers' repeat_kv: [B, Hkv, S, D] -> [B, Hkv * n_rep, S, D]."""
    b, hkv, s, d = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, hkv, n_rep, s, d).reshape(b, hkv * n_rep, s, d)


class LlamaAttention(nn.Module):
    """RMSNorm -> q/k/v projections -> RoPE -> GQA (repeat_kv) -> SDPA with an explicit
    bool causal mask -> [B, S, H*D] -> static FP8 quant of the attention output (the input
    of an FP8 o_proj)."""

    def __init__(self, hidden: int = 64, hq: int = 4, hkv: int = 2, d: int = 16) -> None:
        super().__init__()
        self.hq, self.hkv, self.d = hq, hkv, d
        self.norm = nn.Parameter(1 + 0.1 * torch.randn(hidden))
        self.q_proj = nn.Linear(hidden, hq * d, bias=False)
        self.k_proj = nn.Linear(hidden, hkv * d, bias=False)
        self.v_proj = nn.Linear(hidden, hkv * d, bias=False)
        self.register_buffer("o_scale", torch.tensor([0.004]))

    def forward(self, x: Tensor) -> Tensor:
        return quant_fp8(self.attend(x), self.o_scale)

    def attend(self, x: Tensor) -> Tensor:
        """The attention output [B, S, H*D] before the quant."""
        b, s, _ = x.shape
        h = rms_norm(x, self.norm)
        q = self.q_proj(h).view(b, s, self.hq, self.d).transpose(1, 2)
        k = self.k_proj(h).view(b, s, self.hkv, self.d).transpose(1, 2)
        v = self.v_proj(h).view(b, s, self.hkv, self.d).transpose(1, 2)
        pos = torch.arange(s, device=x.device)
        q, k = rope(q, pos), rope(k, pos)
        k, v = repeat_kv(k, self.hq // self.hkv), repeat_kv(v, self.hq // self.hkv)
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return o.transpose(1, 2).reshape(b, s, self.hq * self.d)


def quant_fp8(o: Tensor, s: Tensor) -> Tensor:
    """The static FP8 quant as Llama FP8 checkpoints spell it (what the rules fuse)."""
    return (o.float() / s).clamp(-448, 448).to(FP8)


def make_model(seed: int = 0) -> LlamaAttention:
    torch.manual_seed(seed)
    return LlamaAttention().eval()


def make_input(seq: int, seed: int, batch: int = 2) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, seq, 64, generator=g)


def check_fp8_output(model: LlamaAttention, x: Tensor, out: Tensor) -> None:
    """``out`` (the compiled model's output) meets docs/numerics.md's FP8-out acceptance
    against eager: attention in fp32, then the reference quantizer."""
    with torch.no_grad():
        wide = model.attend(x).float()
    ref = quant_fp8(wide, model.o_scale)
    assert_fp8_close(out, ref, wide, model.o_scale)


def run_counted(fn: Any, *args: Tensor) -> tuple[Any, Counter[str]]:
    """``fn(*args)`` under no_grad, with a count of the ``graphfuse::`` ops that ran.

    The count comes from the profiler's op events (a TorchDispatchMode would not do:
    Dynamo runs frames eagerly while one is active, so it would count the eager model).
    """
    with torch.no_grad(), torch.profiler.profile(activities=[ProfilerActivity.CPU]) as prof:
        out = fn(*args)
    counts: Counter[str] = Counter()
    for ev in prof.events():
        if ev.name.startswith("graphfuse::"):
            counts[ev.name.removeprefix("graphfuse::")] += 1
    return out, counts
