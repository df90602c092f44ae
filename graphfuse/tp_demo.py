"""A tensor-parallel Llama-style attention block for the collective-carrying fusion tests.

Column-parallel q/k/v (each rank owns ``heads / world`` query heads and ``kv_heads / world``
kv heads), attention with an explicit bool causal mask, the o_proj input statically
FP8-quantized (dequantised before the local matmul), a row-parallel o_proj and an
all-reduce through functional collectives. ``TPAttention(..., world=1)`` is the unsharded
model the shards are checked against.

Example (inside an initialised process group)::

    block = TPAttention.shard_of(full, rank, world)
    ep = torch.export.export(block, args)
    fused = graphfuse.apply(ep, "trtllm").program
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

FP8 = torch.float8_e4m3fn


class TPAttention(torch.nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, rank: int = 0, world: int = 1):
        super().__init__()
        if heads % world or kv_heads % world:
            raise ValueError(f"heads {heads} / kv_heads {kv_heads} do not split over {world}")
        self.d = hidden // heads
        self.h, self.hkv = heads // world, kv_heads // world
        self.rank, self.world = rank, world
        self.wq = torch.nn.Parameter(torch.randn(self.h * self.d, hidden) / math.sqrt(hidden))
        self.wk = torch.nn.Parameter(torch.randn(self.hkv * self.d, hidden) / math.sqrt(hidden))
        self.wv = torch.nn.Parameter(torch.randn(self.hkv * self.d, hidden) / math.sqrt(hidden))
        self.wo = torch.nn.Parameter(torch.randn(hidden, self.h * self.d) / math.sqrt(hidden))
        self.register_buffer("out_scale", torch.tensor(3.0 / 448.0))

    @classmethod
    def shard_of(cls, full: TPAttention, rank: int, world: int) -> TPAttention:
        """Rank ``rank``'s shard of an unsharded block (same weights)."""
        hidden = full.wq.shape[1]
        shard = cls(hidden, full.h, full.hkv, rank, world)
        rq = slice(rank * shard.h * shard.d, (rank + 1) * shard.h * shard.d)
        rkv = slice(rank * shard.hkv * shard.d, (rank + 1) * shard.hkv * shard.d)
        with torch.no_grad():
            shard.wq.copy_(full.wq[rq])
            shard.wk.copy_(full.wk[rkv])
            shard.wv.copy_(full.wv[rkv])
            shard.wo.copy_(full.wo[:, rq])
            shard.out_scale.copy_(full.out_scale)
        return shard

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = F.linear(x, self.wq).view(b, s, self.h, self.d).transpose(1, 2)
        k = F.linear(x, self.wk).view(b, s, self.hkv, self.d).transpose(1, 2)
        v = F.linear(x, self.wv).view(b, s, self.hkv, self.d).transpose(1, 2)
        n = self.h // self.hkv
        k = k[:, :, None].expand(b, self.hkv, n, s, self.d).reshape(b, self.h, s, self.d)
        v = v[:, :, None].expand(b, self.hkv, n, s, self.d).reshape(b, self.h, s, self.d)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.d**-0.5)
        o = o.transpose(1, 2).reshape(b, s, -1)
        q8 = (o.float() / self.out_scale).clamp(-448, 448).to(FP8)
        y = F.linear(q8.to(x.dtype) * self.out_scale, self.wo)
        if self.world > 1:
            import torch.distributed as dist
            from torch.distributed import _functional_collectives as funcol

            y = funcol.all_reduce(y, "sum", dist.group.WORLD)
        return y
