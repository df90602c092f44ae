"""The built-in demo: a small Llama-style decoder with static output quantization after
attention, exported, fused by ``trtllm``, run and compared; and the same decoder quantized
for FP8 serving (a static quant in front of every linear, and an MLP) fused by ``serving``.

``run_demo()`` does the work and returns plain data; ``graphfuse demo`` renders it.

Example::

    from graphfuse.demo import run_demo
    for case in run_demo():
        print(case.name, case.counts, case.agreement, case.speedup)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from . import api

FP8 = torch.float8_e4m3fn


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def _repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, n_rep, s, d).reshape(b, h * n_rep, s, d)


class DemoAttention(torch.nn.Module):
    """Llama-style attention whose o_proj input is statically quantized (FP8 or NVFP4)."""

    def __init__(self, hidden: int, heads: int, kv_heads: int, out_format: str) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.out_format = out_format
        d = self.head_dim
        self.q_proj = torch.nn.Linear(hidden, heads * d, bias=False)
        self.k_proj = torch.nn.Linear(hidden, kv_heads * d, bias=False)
        self.v_proj = torch.nn.Linear(hidden, kv_heads * d, bias=False)
        self.o_proj = torch.nn.Linear(heads * d, hidden, bias=False)
        # static calibration: attention outputs are convex mixes of v, |v| <~ 4
        self.register_buffer("out_scale", torch.tensor(4.0 / 448.0))
        self.register_buffer("out_global_scale", torch.tensor(448.0 * 6.0 / 4.0))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        n_rep = self.heads // self.kv_heads
        k, v = _repeat_kv(k, n_rep), _repeat_kv(v, n_rep)
        o = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=1.0 / math.sqrt(self.head_dim)
        )
        o = o.transpose(1, 2).reshape(b, s, -1)
        if self.out_format in ("fp8", "serving"):
            o = _fp8_qdq(o, self.out_scale)
        else:
            packed, sf = torch.ops.graphfuse.nvfp4_quant(o, self.out_global_scale)
            o = torch.ops.graphfuse.nvfp4_dequant(packed, sf, self.out_global_scale, x.dtype)
            o = o.view(b, s, -1)
        return self.o_proj(o)


def _fp8_qdq(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """A static FP8 quant of ``x`` and its dequant (what an FP8 linear reads)."""
    q8 = (x.float() / scale).clamp(-448, 448).to(FP8)
    return q8.to(x.dtype) * scale.to(x.dtype)


class DemoMLP(torch.nn.Module):
    """SiLU MLP of a serving-quantized decoder: FP8 quants of its input and of silu(gate) * up."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.gate_proj = torch.nn.Linear(hidden, 2 * hidden, bias=False)
        self.up_proj = torch.nn.Linear(hidden, 2 * hidden, bias=False)
        self.down_proj = torch.nn.Linear(2 * hidden, hidden, bias=False)
        self.register_buffer("act_scale", torch.tensor(2.0 / 448.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = F.silu(self.gate_proj(x)) * self.up_proj(x)
        return self.down_proj(_fp8_qdq(a, self.act_scale))


class DemoDecoder(torch.nn.Module):
    """A stack of :class:`DemoAttention` blocks with residuals and RMSNorm; ``"serving"``
    quantizes every linear's input (the norms' outputs too) and adds a :class:`DemoMLP`."""

    def __init__(self, layers: int, hidden: int, heads: int, kv_heads: int, out_format: str):
        super().__init__()
        self.serving = out_format == "serving"
        self.blocks = torch.nn.ModuleList(
            DemoAttention(hidden, heads, kv_heads, out_format) for _ in range(layers)
        )
        self.norms = torch.nn.ModuleList(torch.nn.RMSNorm(hidden) for _ in range(layers))
        if self.serving:
            self.mlp_norms = torch.nn.ModuleList(torch.nn.RMSNorm(hidden) for _ in range(layers))
            self.mlps = torch.nn.ModuleList(DemoMLP(hidden) for _ in range(layers))
            self.register_buffer("in_scale", torch.tensor(5.0 / 448.0))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor):
        for i, (norm, block) in enumerate(zip(self.norms, self.blocks)):
            if not self.serving:
                x = x + block(norm(x), cos, sin, mask)
                continue
            x = x + block(_fp8_qdq(norm(x), self.in_scale), cos, sin, mask)
            x = x + self.mlps[i](_fp8_qdq(self.mlp_norms[i](x), self.in_scale))
        return x


def demo_inputs(batch: int, seq: int, hidden: int, head_dim: int, dtype: torch.dtype) -> tuple:
    """Hidden states, RoPE tables and an explicit bool causal mask [B, 1, S, S]."""
    x = torch.randn(batch, seq, hidden, dtype=dtype)
    pos = torch.arange(seq, dtype=torch.float32)[:, None]
    freq = 10000.0 ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    ang = torch.cat((pos * freq, pos * freq), dim=-1)
    mask = torch.ones(seq, seq, dtype=torch.bool).tril().expand(batch, 1, seq, seq)
    return x, ang.cos().to(dtype), ang.sin().to(dtype), mask.contiguous()


@dataclass
class DemoCase:
    """One demo run: what fired, the graph region before/after, agreement and speed."""

    name: str
    counts: dict[str, int]
    nodes_before: int
    nodes_after: int
    region_before: list[str]
    region_after: list[str]
    agreement: dict[str, float]
    time_unfused_ms: float
    time_fused_ms: float
    near_misses: list[str] = field(default_factory=list)

    @property
    def speedup(self) -> float:
        return self.time_unfused_ms / self.time_fused_ms


def _interleaved_median_ms(
    a: Callable[[], object], b: Callable[[], object], repeats: int
) -> tuple[float, float]:
    """Median ms of ``a`` and ``b``, timed alternately (after one warm-up call each)."""
    a(), b()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for fn, out in ((a, times[0]), (b, times[1])):
            t = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t) * 1e3)
    return tuple(sorted(t)[len(t) // 2] for t in times)  # type: ignore[return-value]


def _region(gm: torch.fx.GraphModule, first_layer_only: bool = True) -> list[str]:
    """The op names of the first attention block (between the first q projection and the
    first o projection)."""
    names = []
    started = False
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        target = str(node.target).replace("aten.", "").replace(".default", "")
        if "sdpa" in node.name or "attention" in target or "scaled_dot" in target:
            started = True
        if started:
            names.append(target)
            if "linear" in target or "mm" == target or "addmm" in target:
                break
    return names


def run_case(
    out_format: str,
    *,
    layers: int = 2,
    batch: int = 2,
    seq: int = 128,
    hidden: int = 512,
    heads: int = 8,
    kv_heads: int = 2,
    repeats: int = 5,
    progress: Callable[[str], None] | None = None,
) -> DemoCase:
    """Build, export, fuse, run and compare one demo model (``out_format`` fp8 or nvfp4,
    fused by ``trtllm``; ``serving``, fused by the ``serving`` rule set)."""
    say = progress or (lambda _msg: None)
    torch.manual_seed(0)
    dtype = torch.bfloat16
    model = DemoDecoder(layers, hidden, heads, kv_heads, out_format).to(dtype).eval()
    args = demo_inputs(batch, seq, hidden, hidden // heads, dtype)
    say(f"exporting the {out_format} decoder ({layers} layers)")
    ep = torch.export.export(model, args)
    rules = "serving" if out_format == "serving" else "trtllm"
    say(f"applying {rules}")
    result = api.apply(ep, rules)
    before, after = ep.module(), result.program.module()
    fresh = demo_inputs(batch, seq, hidden, hidden // heads, dtype)
    say("running both programs")
    with torch.no_grad():
        ref, out = before(*fresh).float(), after(*fresh).float()
        rel = ((out - ref).norm() / ref.norm()).item()
        close = torch.isclose(out, ref, rtol=0.05, atol=0.05).float().mean().item()
        t_unfused, t_fused = _interleaved_median_ms(
            lambda: before(*fresh), lambda: after(*fresh), repeats
        )
    return DemoCase(
        name="serving (FP8 before every linear)"
        if out_format == "serving"
        else f"{out_format} out",
        counts={k: v for k, v in result.report.counts.items() if v},
        nodes_before=len(ep.graph.nodes),
        nodes_after=len(result.program.graph.nodes),
        region_before=_region(ep.graph_module),
        region_after=_region(result.program.graph_module),
        agreement={"relative_l2_error": rel, "fraction_close": close},
        time_unfused_ms=t_unfused,
        time_fused_ms=t_fused,
        near_misses=[str(n) for n in result.report.near_misses],
    )


def run_demo(progress: Callable[[str], None] | None = None) -> list[DemoCase]:
    """The FP8-out and NVFP4-out demo cases, and the serving-quantized decoder."""
    return [run_case(fmt, progress=progress) for fmt in ("fp8", "nvfp4", "serving")]
