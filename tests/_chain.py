"""The section-1 workload (docs/benchmarks.md): a chain of N attention -> static FP8 quant
blocks, one block traced per IR (pre-dispatch export, core ATen, Inductor's own trace) and
tiled; shared by ``benchmarks/matcher.py`` and the tests that run it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode

from graphfuse import Rule

aten = torch.ops.aten
BF16, FP8 = torch.bfloat16, torch.float8_e4m3fn
SCALE = 0.125
B, H, S, D = 1, 2, 8, 16


def block(x: torch.Tensor, k: torch.Tensor, v: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """One block: attention with a static FP8 output quant (the search pattern)."""
    a = torch.matmul(x, k.transpose(2, 3)) * SCALE
    a = torch.softmax(a, -1)
    a = torch.matmul(a, v)
    return (a / s).clamp(-448, 448).to(FP8)


def link(x: torch.Tensor, k: torch.Tensor, v: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """A block and the cast that feeds the next one."""
    return block(x, k, v, s).to(BF16)


def fused(x: torch.Tensor, k: torch.Tensor, v: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """The replacement: one ``graphfuse::attention_fp8`` call."""
    return torch.ops.graphfuse.attention_fp8.default(
        x, k, v, None, None, None, None, "none", SCALE, "bhsd", "default", s
    )


class _Fn(torch.nn.Module):
    def __init__(self, fn: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor, s: torch.Tensor) -> Any:
        return self.fn(x, k, v, s)


def chain_inputs(seed: int = 0, mode: FakeTensorMode | None = None) -> tuple[torch.Tensor, ...]:
    """x, k, v (bf16 [B, H, S, D]) and a positive fp32 scale s; fake under ``mode``."""
    g = torch.Generator().manual_seed(seed)

    def mk(*shape: int, dtype: torch.dtype = BF16) -> torch.Tensor:
        return torch.randn(shape, generator=g).to(dtype)

    real = (mk(B, H, S, D), mk(B, H, S, D), mk(B, H, S, D), mk(dtype=torch.float32).abs() + 0.5)
    return real if mode is None else tuple(mode.from_tensor(t) for t in real)


def traced(fn: Callable[..., torch.Tensor], ir: str) -> fx.GraphModule:
    """One call of ``fn`` as a graph in ``ir`` (placeholders x, k, v, s; meta["val"] set)."""
    if ir == "inductor":
        from torch._inductor.pattern_matcher import fwd_only

        mode = FakeTensorMode()
        args = chain_inputs(0, mode)
        with mode:
            return fwd_only(fn, args)
    ep = torch.export.export(_Fn(fn), chain_inputs())
    if ir == "core":
        ep = ep.run_decompositions()
    return _plain(ep.graph_module)


def _plain(gm: fx.GraphModule) -> fx.GraphModule:
    """The exported graph with placeholders renamed x, k, v, s, a single output and no
    ``_assert_tensor_metadata`` (replace_pattern would count it as a user outside)."""
    g = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    names = iter("xkvs")
    out = None
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            env[n] = g.placeholder(next(names))
            env[n].meta = dict(n.meta)
        elif n.op == "output":
            res = n.args[0]
            out = res[0] if isinstance(res, (list, tuple)) else res
        elif n.target is not aten._assert_tensor_metadata.default:
            env[n] = g.node_copy(n, lambda a: env[a])
    g.output(env[out])
    return fx.GraphModule(torch.nn.Module(), g)


def tile(one: fx.GraphModule, n: int) -> fx.GraphModule:
    """``n`` copies of ``one`` (a link), each one's output feeding the next one's x."""
    g = fx.Graph()
    phs = [p for p in one.graph.nodes if p.op == "placeholder"]
    new = {}
    for p in phs:
        new[p] = g.placeholder(p.name)
        new[p].meta = dict(p.meta)
    body = [nd for nd in one.graph.nodes if nd.op not in ("placeholder", "output")]
    out = one.graph.output_node().args[0]
    x = new[phs[0]]
    for _ in range(n):
        env = dict(new)
        env[phs[0]] = x
        for nd in body:
            env[nd] = g.node_copy(nd, lambda a, env=env: env[a])
        x = env[out]
    g.output(x)
    return fx.GraphModule(torch.nn.Module(), g)


def local_rule(ir: str) -> Rule:
    """The block as traced in ``ir``, as a graphfuse rule (for IRs whose spelling the
    bundled rule set does not know)."""
    from graphfuse.rules.trace import graph_to_patterns

    (pat,) = graph_to_patterns(traced(block, ir).graph, ["x", "k", "v", "s"])

    def rewrite(m: Any, b: Any) -> Any:
        return b.call(
            torch.ops.graphfuse.attention_fp8.default,
            *(m["x"], m["k"], m["v"], None, None, None, None, "none", SCALE, "bhsd", "default"),
            m["s"],
        )

    return Rule(f"local_attention_fp8_{ir}", pat, rewrite, priority=30)
