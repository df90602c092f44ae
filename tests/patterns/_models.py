"""Small models written the way transformers' modeling code writes them, for the ``trtllm``
rule-set tests: a Llama decoder layer (RoPE, repeat_kv, explicit bool causal mask, FP8
o_proj through ``torch._scaled_mm``), a BERT encoder (additive padding mask; SDPA or the
hand-written eager attention), a GPT-2 block (one fused qkv projection, split), a decode
step over an FP8 KV cache, and an attention with NVFP4 output quant.

Every model takes its dtype and sizes as arguments, so the negative tests reuse them
(head_dim 72, a per-channel scale, dropout, a residual user of the attention output).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

import graphfuse  # noqa: F401  (registers graphfuse:: ops)

FP8 = torch.float8_e4m3fn
gf = torch.ops.graphfuse


@dataclass
class Config:
    hidden: int = 256
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 64
    dtype: torch.dtype = torch.bfloat16
    # negative-suite switches
    per_channel_scale: bool = False
    dropout: float = 0.0
    residual_from_attn: bool = False


def _seeded(module: nn.Module, seed: int) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (1.0 / math.sqrt(p.shape[-1])))
    return module


# --------------------------------------------------------------------------- helpers (HF)


def rotate_half(x: Tensor) -> Tensor:
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def repeat_kv(hidden_states: Tensor, n_rep: int) -> Tensor:
    """transformers' repeat_kv: [B, Hkv, S, D] -> [B, Hkv * n_rep, S, D]."""
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(
        batch, num_key_value_heads, n_rep, slen, head_dim
    )
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def static_fp8(x: Tensor, scale: Tensor) -> Tensor:
    """The eager static FP8 quant as quantization toolkits write it."""
    return (x.float() / scale).clamp(-448, 448).to(FP8)


def rope(positions: Tensor, dim: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    freqs = positions[..., None].float() * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def causal_bool_mask(attention_mask: Tensor) -> Tensor:
    """[B, S] padding mask (1 = token) -> bool [B, 1, S, S], True = attend (HF sdpa style)."""
    b, s = attention_mask.shape
    idx = torch.arange(s, device=attention_mask.device)
    causal = idx[None, :] <= idx[:, None]
    return causal[None, None, :, :] & attention_mask[:, None, None, :].bool()


# --------------------------------------------------------------------------- Llama


class LlamaAttention(nn.Module):
    """q/k/v/o projections, RoPE, repeat_kv, SDPA with an explicit bool mask and scale,
    transpose + reshape, static FP8 quant of the o_proj input, ``_scaled_mm``."""

    def __init__(self, cfg: Config, seed: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        h, d = cfg.heads, cfg.head_dim
        self.num_key_value_groups = cfg.heads // cfg.kv_heads
        self.scaling = d**-0.5
        self.q_proj = nn.Linear(cfg.hidden, h * d, bias=False, dtype=cfg.dtype)
        self.k_proj = nn.Linear(cfg.hidden, cfg.kv_heads * d, bias=False, dtype=cfg.dtype)
        self.v_proj = nn.Linear(cfg.hidden, cfg.kv_heads * d, bias=False, dtype=cfg.dtype)
        _seeded(self, seed)
        w = torch.randn(cfg.hidden, h * d, generator=torch.Generator().manual_seed(seed + 1))
        w_scale = w.abs().amax() / 448
        self.register_buffer("o_weight", (w / w_scale).to(FP8))
        self.register_buffer("o_weight_scale", w_scale.reshape(()).float())
        scale_shape = (h * d,) if cfg.per_channel_scale else ()
        self.register_buffer("input_scale", torch.full(scale_shape, 0.02))

    def forward(self, hidden_states: Tensor, cos: Tensor, sin: Tensor, mask: Tensor) -> Tensor:
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.cfg.head_dim)
        q = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        k = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        v = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        k = repeat_kv(k, self.num_key_value_groups)
        v = repeat_kv(v, self.num_key_value_groups)
        attn = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.cfg.dropout, scale=self.scaling
        )
        attn = attn.transpose(1, 2).contiguous()
        attn = attn.reshape(*input_shape, -1).contiguous()
        x = attn.to(torch.float32)
        x8 = static_fp8(x, self.input_scale)
        out = torch._scaled_mm(
            x8.reshape(-1, x8.shape[-1]),
            self.o_weight.t(),
            scale_a=self.input_scale if not self.cfg.per_channel_scale else torch.ones(()),
            scale_b=self.o_weight_scale,
            out_dtype=self.cfg.dtype,
        ).reshape(*input_shape, -1)
        if self.cfg.residual_from_attn:
            out = out + attn.to(out.dtype)
        return out, x8


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size: int, dtype: torch.dtype, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size, dtype=dtype))
        self.variance_epsilon = eps

    def forward(self, hidden_states: Tensor) -> Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class LlamaLayer(nn.Module):
    """A decoder stack of ``layers`` pre-norm attention blocks (no MLP, for brevity)."""

    def __init__(self, cfg: Config, layers: int = 1) -> None:
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(LlamaAttention(cfg, seed=i) for i in range(layers))
        self.norms = nn.ModuleList(LlamaRMSNorm(cfg.hidden, cfg.dtype) for _ in range(layers))

    def forward(self, hidden_states: Tensor, attention_mask: Tensor) -> tuple[Tensor, list]:
        """Returns the hidden states and (for the tests) every layer's FP8 o_proj input."""
        s = hidden_states.shape[1]
        positions = torch.arange(s, device=hidden_states.device)[None, :]
        cos, sin = rope(positions, self.cfg.head_dim, self.cfg.dtype)
        mask = causal_bool_mask(attention_mask)
        quantized = []
        for norm, layer in zip(self.norms, self.layers):
            out, x8 = layer(norm(hidden_states), cos, sin, mask)
            hidden_states = hidden_states + out
            quantized.append(x8)
        return hidden_states, quantized


# --------------------------------------------------------------------------- BERT


class BertSelfAttention(nn.Module):
    """BERT self-attention with an additive padding mask [B, 1, 1, S]; ``eager`` selects
    transformers' hand-written attention (matmul, / sqrt(d), + mask, softmax in fp32),
    else SDPA. The context is quantized with ``graphfuse::fp8_static_quant``."""

    def __init__(self, cfg: Config, eager: bool = False, seed: int = 0) -> None:
        super().__init__()
        self.cfg, self.eager = cfg, eager
        n = cfg.heads * cfg.head_dim
        self.query = nn.Linear(cfg.hidden, n, dtype=cfg.dtype)
        self.key = nn.Linear(cfg.hidden, n, dtype=cfg.dtype)
        self.value = nn.Linear(cfg.hidden, n, dtype=cfg.dtype)
        _seeded(self, seed)
        self.register_buffer("out_scale", torch.tensor([0.01]))

    def transpose_for_scores(self, x: Tensor) -> Tensor:
        new_x_shape = x.size()[:-1] + (self.cfg.heads, self.cfg.head_dim)
        return x.view(new_x_shape).permute(0, 2, 1, 3)

    def forward(self, hidden_states: Tensor, attention_mask: Tensor) -> Tensor:
        ext = (1.0 - attention_mask[:, None, None, :].to(self.cfg.dtype)) * torch.finfo(
            self.cfg.dtype
        ).min
        q = self.transpose_for_scores(self.query(hidden_states))
        k = self.transpose_for_scores(self.key(hidden_states))
        v = self.transpose_for_scores(self.value(hidden_states))
        if self.eager:
            scores = torch.matmul(q, k.transpose(-1, -2))
            scores = scores / math.sqrt(self.cfg.head_dim)
            scores = scores + ext
            probs = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
            ctx = torch.matmul(probs, v)
        else:
            ctx = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=ext, dropout_p=self.cfg.dropout
            )
        ctx = ctx.permute(0, 2, 1, 3).contiguous()
        ctx = ctx.view(ctx.size()[:-2] + (self.cfg.heads * self.cfg.head_dim,))
        return gf.fp8_static_quant(ctx, self.out_scale)


# --------------------------------------------------------------------------- GPT-2


class GPT2Attention(nn.Module):
    """GPT-2 block attention: one ``c_attn`` projection split into q, k, v, SDPA with a
    bool causal mask, ``merge_heads`` (permute + view) and an FP8 quant spelled
    ``x * (1 / s)`` with ``clamp_min`` / ``clamp_max``."""

    def __init__(self, cfg: Config, seed: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        n = cfg.heads * cfg.head_dim
        self.c_attn = nn.Linear(cfg.hidden, 3 * n, dtype=cfg.dtype)
        _seeded(self, seed)
        self.register_buffer("out_scale", torch.tensor(0.015))

    def _split_heads(self, x: Tensor) -> Tensor:
        return x.view(x.size()[:-1] + (self.cfg.heads, self.cfg.head_dim)).permute(0, 2, 1, 3)

    def forward(self, hidden_states: Tensor) -> Tensor:
        n = self.cfg.heads * self.cfg.head_dim
        q, k, v = self.c_attn(hidden_states).split(n, dim=2)
        q, k, v = self._split_heads(q), self._split_heads(k), self._split_heads(v)
        s = hidden_states.shape[1]
        mask = torch.ones(s, s, dtype=torch.bool, device=q.device).tril()[None, None]
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        a = a.permute(0, 2, 1, 3).contiguous()
        a = a.view(a.size()[:-2] + (n,))
        inv = 1 / self.out_scale
        return (a.float() * inv).clamp_min(-448).clamp_max(448).to(FP8)


# --------------------------------------------------------------------------- FP8 KV cache


class FP8CacheDecode(nn.Module):
    """One decode step over an FP8 KV cache: k8/v8 buffers [B, Hkv, Smax, D] dequantized
    with per-tensor scales, the new token written at ``pos``, SDPA with ``enable_gqa`` and a
    bool mask over the valid positions; 16-bit output, or FP8 (``quant_out``)."""

    def __init__(self, cfg: Config, batch: int, max_len: int, quant_out: bool = False) -> None:
        super().__init__()
        self.cfg, self.quant_out = cfg, quant_out
        g = torch.Generator().manual_seed(7)
        shape = (batch, cfg.kv_heads, max_len, cfg.head_dim)
        self.register_buffer("k8", (torch.randn(shape, generator=g) * 60).to(FP8))
        self.register_buffer("v8", (torch.randn(shape, generator=g) * 60).to(FP8))
        self.register_buffer("k_scale", torch.tensor(0.02))
        self.register_buffer("v_scale", torch.tensor(0.03))
        self.register_buffer("out_scale", torch.tensor(0.004))

    def forward(self, q: Tensor, lengths: Tensor) -> Tensor:
        k = self.k8.to(self.cfg.dtype) * self.k_scale
        v = self.v8.to(self.cfg.dtype) * self.v_scale
        pos = torch.arange(self.k8.shape[2], device=q.device)
        mask = (pos[None, :] < lengths[:, None])[:, None, None, :]
        o = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, enable_gqa=True
        )
        b = q.shape[0]
        o = o.transpose(1, 2).reshape(b, -1)
        if self.quant_out:
            return gf.fp8_static_quant(o, self.out_scale)
        return o


# --------------------------------------------------------------------------- NVFP4 out


class NVFP4OutAttention(nn.Module):
    """Attention whose output feeds an NVFP4 GEMM: SDPA (bool causal mask), transpose +
    reshape to [B*S, H*D], ``graphfuse::nvfp4_quant`` (both outputs returned)."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.register_buffer("global_scale", torch.tensor(448.0 * 6 / 3.0))

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        o = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.cfg.dropout, enable_gqa=True
        )
        b, h, s, d = o.shape
        o = o.transpose(1, 2).reshape(b * s, h * d)
        return gf.nvfp4_quant(o, self.global_scale)


def attention_wide(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, g: Tensor) -> Tensor:
    """The fp32 attention output of :class:`NVFP4OutAttention` as ``[B*S, H*D]``."""
    from graphfuse.ops.attention_ref import attention_fp32

    del g
    return attention_fp32(q.float(), k.float(), v.float(), attn_mask=mask, layout="(bs)(hd)")
