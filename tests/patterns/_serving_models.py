"""A Llama-style decoder quantized for FP8 serving, written the way transformers' modeling code
writes it (LlamaRMSNorm, RoPE, repeat_kv, SDPA with a bool causal mask, SiLU MLP), with a
static FP8 quant in front of every linear: one quant of the input norm's output feeding q, k
and v; one of the attention output feeding o_proj; one of the post-attention norm's output
feeding gate and up; one of the activation feeding down. FP8 GEMMs are ``torch._scaled_mm``;
the final norm feeds a bf16 head (unquantized)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ._models import apply_rotary_pos_emb, repeat_kv, rope, static_fp8

FP8 = torch.float8_e4m3fn


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


class Fp8Weight(nn.Module):
    """A linear's weight in FP8 with its dequant scale, and the static scale of its input."""

    def __init__(self, n_in: int, n_out: int, seed: int, input_scale: float) -> None:
        super().__init__()
        w = torch.randn(n_out, n_in, generator=_gen(seed)) / math.sqrt(n_in)
        scale = w.abs().amax() / 448
        self.register_buffer("weight", (w / scale).to(FP8))
        self.register_buffer("weight_scale", scale.reshape(()).float())
        self.register_buffer("input_scale", torch.tensor(input_scale))

    def forward(self, x8: Tensor, out_dtype: torch.dtype) -> Tensor:
        out = torch._scaled_mm(
            x8.reshape(-1, x8.shape[-1]),
            self.weight.t(),
            scale_a=self.input_scale,
            scale_b=self.weight_scale,
            out_dtype=out_dtype,
        )
        return out.reshape(*x8.shape[:-1], -1)


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden: int, dtype: torch.dtype, seed: int, eps: float = 1e-6) -> None:
        super().__init__()
        w = 1 + 0.1 * torch.randn(hidden, generator=_gen(seed))
        self.weight = nn.Parameter(w.to(dtype))
        self.variance_epsilon = eps

    def forward(self, hidden_states: Tensor) -> Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class DecoderLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, inter: int, dtype, seed: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.dtype = dtype
        d = self.head_dim
        self.input_layernorm = LlamaRMSNorm(hidden, dtype, seed)
        self.post_attention_layernorm = LlamaRMSNorm(hidden, dtype, seed + 1)
        self.q_proj = Fp8Weight(hidden, heads * d, seed + 2, 0.0311)
        self.k_proj = Fp8Weight(hidden, kv_heads * d, seed + 3, 0.0311)
        self.v_proj = Fp8Weight(hidden, kv_heads * d, seed + 4, 0.0311)
        self.o_proj = Fp8Weight(heads * d, hidden, seed + 5, 0.0103)
        self.gate_proj = Fp8Weight(hidden, inter, seed + 6, 0.0297)
        self.up_proj = Fp8Weight(hidden, inter, seed + 7, 0.0297)
        self.down_proj = Fp8Weight(inter, hidden, seed + 8, 0.00517)

    def forward(self, hidden_states: Tensor, cos: Tensor, sin: Tensor, mask: Tensor):
        """Returns the new hidden states and the layer's four FP8 GEMM inputs."""
        b, s, _ = hidden_states.shape
        residual = hidden_states
        x8 = static_fp8(self.input_layernorm(hidden_states), self.q_proj.input_scale)
        q = self.q_proj(x8, self.dtype).view(b, s, -1, self.head_dim).transpose(1, 2)
        k = self.k_proj(x8, self.dtype).view(b, s, -1, self.head_dim).transpose(1, 2)
        v = self.v_proj(x8, self.dtype).view(b, s, -1, self.head_dim).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        k = repeat_kv(k, self.heads // self.kv_heads)
        v = repeat_kv(v, self.heads // self.kv_heads)
        attn = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=self.head_dim**-0.5
        )
        attn = attn.transpose(1, 2).reshape(b, s, -1).contiguous()
        o8 = static_fp8(attn, self.o_proj.input_scale)
        hidden_states = residual + self.o_proj(o8, self.dtype)
        residual = hidden_states
        m8 = static_fp8(self.post_attention_layernorm(hidden_states), self.gate_proj.input_scale)
        act = nn.functional.silu(self.gate_proj(m8, self.dtype)) * self.up_proj(m8, self.dtype)
        d8 = static_fp8(act, self.down_proj.input_scale)
        hidden_states = residual + self.down_proj(d8, self.dtype)
        return hidden_states, [x8, o8, m8, d8]


class Fp8Decoder(nn.Module):
    """``layers`` decoder layers over input embeddings ``[B, S, hidden]``; returns the logits
    of a bf16 head after the final norm, and every layer's FP8 GEMM inputs."""

    def __init__(
        self,
        layers: int = 2,
        hidden: int = 256,
        heads: int = 4,
        kv_heads: int = 2,
        inter: int = 512,
        vocab: int = 384,
        dtype: torch.dtype = torch.bfloat16,
    ) -> None:
        super().__init__()
        self.head_dim, self.dtype = hidden // heads, dtype
        self.layers = nn.ModuleList(
            DecoderLayer(hidden, heads, kv_heads, inter, dtype, seed=10 * i) for i in range(layers)
        )
        self.norm = LlamaRMSNorm(hidden, dtype, seed=999)
        head = torch.randn(vocab, hidden, generator=_gen(7)) / math.sqrt(hidden)
        self.lm_head = nn.Parameter(head.to(dtype))

    def forward(self, inputs_embeds: Tensor) -> tuple[Tensor, list[Tensor]]:
        s = inputs_embeds.shape[1]
        positions = torch.arange(s, device=inputs_embeds.device)[None, :]
        cos, sin = rope(positions, self.head_dim, self.dtype)
        idx = torch.arange(s, device=inputs_embeds.device)
        mask = (idx[None, :] <= idx[:, None])[None, None]
        hidden_states, quantized = inputs_embeds, []
        for layer in self.layers:
            hidden_states, q8 = layer(hidden_states, cos, sin, mask)
            quantized += q8
        logits = self.norm(hidden_states) @ self.lm_head.t()
        return logits, quantized
