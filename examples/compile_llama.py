"""graphfuse inside torch.compile: a small Llama-style model (RMSNorm, RoPE, GQA via
repeat_kv, SDPA with a bool causal mask, static FP8 quant of the attention output feeding
an FP8-dequantised o_proj) compiled twice, with graphfuse as an Inductor custom pass and as
a compile backend. Prints what fired, which graphfuse ops ran, and agreement with eager.

Run: python examples/compile_llama.py [--layers 2] [--seq 16]
"""

from __future__ import annotations

import argparse
from collections import Counter

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import graphfuse

FP8 = torch.float8_e4m3fn


def rope(x: Tensor) -> Tensor:
    d, s = x.shape[-1], x.shape[-2]
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    ang = torch.arange(s, dtype=torch.float32)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
    return x * cos + torch.cat([-x[..., d // 2 :], x[..., : d // 2]], -1) * sin


class Layer(nn.Module):
    def __init__(self, hidden: int, hq: int, hkv: int) -> None:
        super().__init__()
        self.hq, self.hkv, self.d = hq, hkv, hidden // hq
        self.norm = nn.RMSNorm(hidden)
        self.q_proj = nn.Linear(hidden, hq * self.d, bias=False)
        self.k_proj = nn.Linear(hidden, hkv * self.d, bias=False)
        self.v_proj = nn.Linear(hidden, hkv * self.d, bias=False)
        self.o_proj = nn.Linear(hq * self.d, hidden, bias=False)
        self.register_buffer("o_scale", torch.tensor([0.004]))  # calibrated s_o

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        b, s, _ = x.shape
        h = self.norm(x)
        q = rope(self.q_proj(h).view(b, s, self.hq, self.d).transpose(1, 2))
        k = rope(self.k_proj(h).view(b, s, self.hkv, self.d).transpose(1, 2))
        v = self.v_proj(h).view(b, s, self.hkv, self.d).transpose(1, 2)
        n = self.hq // self.hkv
        k = k[:, :, None].expand(b, self.hkv, n, s, self.d).reshape(b, self.hq, s, self.d)
        v = v[:, :, None].expand(b, self.hkv, n, s, self.d).reshape(b, self.hq, s, self.d)
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        o = o.transpose(1, 2).reshape(b, s, self.hq * self.d)
        o8 = (o.float() / self.o_scale).clamp(-448, 448).to(FP8)
        # An FP8 GEMM would read o8 directly; here: dequantise, then o_proj.
        return x + self.o_proj(o8.float() * self.o_scale), o8


class Llama(nn.Module):
    def __init__(self, layers: int, hidden: int = 128, hq: int = 8, hkv: int = 2) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Layer(hidden, hq, hkv) for _ in range(layers))

    def forward(self, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        fp8 = []
        for layer in self.layers:
            x, o8 = layer(x)
            fp8.append(o8)
        return x, fp8


def graphfuse_ops(fn, x: Tensor) -> tuple[tuple[Tensor, list[Tensor]], Counter[str]]:
    """Run ``fn(x)`` and count the graphfuse:: ops that ran (profiler events)."""
    with torch.no_grad(), torch.profiler.profile() as prof:
        out = fn(x)
    return out, Counter(e.name for e in prof.events() if e.name.startswith("graphfuse::"))


def agreement(out: list[Tensor], ref: list[Tensor]) -> str:
    a = torch.cat([o.view(torch.uint8).flatten() for o in out]).int()
    b = torch.cat([r.view(torch.uint8).flatten() for r in ref]).int()
    within_one = (((a - b).abs() <= 1) & ((a & 0x80) == (b & 0x80))).float().mean()
    return f"FP8 bytes equal {(a == b).float().mean():.4f}, within one e4m3 step {within_one:.4f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seq", type=int, default=16)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = Llama(args.layers).eval()
    x = torch.randn(2, args.seq, 128)
    with torch.no_grad():
        ref_h, ref_fp8 = model(x)

    gpass = graphfuse.inductor_pass()
    backend = graphfuse.compile_backend()
    forms = {
        "inductor_pass": (lambda: torch.compile(model), gpass),
        "compile_backend": (lambda: torch.compile(model, backend=backend), backend),
    }
    for name, (make, hook) in forms.items():
        torch._dynamo.reset()
        with torch._inductor.config.patch(
            post_grad_custom_post_pass=gpass if name == "inductor_pass" else None
        ):
            fn = make()
            with torch.no_grad():
                fn(x)  # compile
            (h, fp8), ops = graphfuse_ops(fn, x)
        fired = {k: v for k, v in hook.report.counts.items() if v}
        print(f"{name}: rules fired {fired}; graphfuse ops ran {dict(ops)}")
        print(f"  {agreement(fp8, ref_fp8)}; hidden max |diff| {(h - ref_h).abs().max():.2e}")


if __name__ == "__main__":
    main()
