"""The ``graphfuse`` op namespace: every schema is defined here, once.

Kernels register against these schemas: C++ CPU kernels in ``graphfuse/csrc`` (through
``TORCH_LIBRARY_IMPL(graphfuse, CPU, m)``), Triton kernels for CUDA in ``graphfuse/triton``,
fake impls in ``graphfuse/ops/_fake_*.py``.
"""

from __future__ import annotations

import torch

LIB = torch.library.Library("graphfuse", "DEF")

# Arguments shared by the fused attention ops (q: [B, Hq, Sq, D]; k, v: [B, Hkv, Skv, D]).
#   *_scale: dequant scale of an FP8 input (None for 16/32-bit inputs)
#   attn_mask: bool (True = keep) or additive, broadcastable to [B, Hq, Sq, Skv]
#   causal: "none" | "top_left" (SDPA's is_causal) | "bottom_right" (queries at the end)
#   scale: softmax scale (None: 1/sqrt(D))
#   layout: "bhsd" -> [B, H, S, D]; "bshd" -> [B, S, H, D]; "bs(hd)" -> [B, S, H*D];
#           "(bs)(hd)" -> [B*S, H*D]
#   precision: "default" (16-bit probabilities on tensor cores) | "fast" (FP8 probabilities)
_ATTN_ARGS = (
    "Tensor q, Tensor k, Tensor v, Tensor? q_scale, Tensor? k_scale, Tensor? v_scale, "
    "Tensor? attn_mask, str causal, float? scale, str layout, str precision"
)

SCHEMAS = {
    "fp8_static_quant": "fp8_static_quant(Tensor x, Tensor scale) -> Tensor",
    "fp8_dequant": "fp8_dequant(Tensor x, Tensor scale, ScalarType dtype) -> Tensor",
    "nvfp4_quant": (
        "nvfp4_quant(Tensor x, Tensor global_scale, bool swizzle=True) -> (Tensor, Tensor)"
    ),
    "nvfp4_dequant": (
        "nvfp4_dequant(Tensor packed, Tensor block_scale, Tensor global_scale, "
        "ScalarType dtype, bool swizzled=True) -> Tensor"
    ),
    # 16-bit (or fp32) output: fusions that only fold FP8 inputs.
    "attention": f"attention({_ATTN_ARGS}, ScalarType out_dtype) -> Tensor",
    # FP8 e4m3 output; out_scale is the output's dequant scale s_o.
    "attention_fp8": f"attention_fp8({_ATTN_ARGS}, Tensor out_scale) -> Tensor",
    # NVFP4 output (packed [M, K/2] uint8, swizzled e4m3 block scales); out_global_scale is
    # the encode global scale g. M, K are the rows / last dim of the output layout.
    "attention_nvfp4": (
        f"attention_nvfp4({_ATTN_ARGS}, Tensor out_global_scale) -> (Tensor, Tensor)"
    ),
    # Paged decode attention (one query token per sequence; semantics in docs/gpu.md):
    # q [B, Hq, D]; kv_cache [num_blocks, 2, block_size, Hkv, D] (16-bit, or FP8 with
    # k_scale / v_scale); block_tables int32 [B, max_blocks]; seq_lens int32 [B] (tokens
    # 0..seq_lens[b]-1 of sequence b are attended, no causal mask). Output [B, Hq, D]
    # (16-bit/fp32 or FP8), or NVFP4 over the [B, Hq*D] view (packed [B, Hq*D/2], swizzled
    # block scales).
    "paged_decode_attention": (
        "paged_decode_attention(Tensor q, Tensor kv_cache, Tensor block_tables, "
        "Tensor seq_lens, Tensor? q_scale, Tensor? k_scale, Tensor? v_scale, float? scale, "
        "ScalarType out_dtype) -> Tensor"
    ),
    "paged_decode_attention_fp8": (
        "paged_decode_attention_fp8(Tensor q, Tensor kv_cache, Tensor block_tables, "
        "Tensor seq_lens, Tensor? q_scale, Tensor? k_scale, Tensor? v_scale, float? scale, "
        "Tensor out_scale) -> Tensor"
    ),
    "paged_decode_attention_nvfp4": (
        "paged_decode_attention_nvfp4(Tensor q, Tensor kv_cache, Tensor block_tables, "
        "Tensor seq_lens, Tensor? q_scale, Tensor? k_scale, Tensor? v_scale, float? scale, "
        "Tensor out_global_scale) -> (Tensor, Tensor)"
    ),
    # RMSNorm and activation-and-mul fused with a static quant (semantics in docs/numerics.md).
    # norm_dtype: the dtype the normalised value is rounded to (None: x's); weight_first:
    # multiply by the weight in fp32 before that rounding (aten.rms_norm) instead of after
    # it (transformers). The add_ variants normalise x + residual and also return that sum.
    "rms_norm_quant_fp8": (
        "rms_norm_quant_fp8(Tensor x, Tensor weight, float eps, Tensor scale, "
        "ScalarType? norm_dtype=None, bool weight_first=False) -> Tensor"
    ),
    "add_rms_norm_quant_fp8": (
        "add_rms_norm_quant_fp8(Tensor x, Tensor residual, Tensor weight, float eps, "
        "Tensor scale, ScalarType? norm_dtype=None, bool weight_first=False) -> (Tensor, Tensor)"
    ),
    "rms_norm_quant_nvfp4": (
        "rms_norm_quant_nvfp4(Tensor x, Tensor weight, float eps, Tensor global_scale, "
        "ScalarType? norm_dtype=None, bool weight_first=False, bool swizzle=True) "
        "-> (Tensor, Tensor)"
    ),
    "add_rms_norm_quant_nvfp4": (
        "add_rms_norm_quant_nvfp4(Tensor x, Tensor residual, Tensor weight, float eps, "
        "Tensor global_scale, ScalarType? norm_dtype=None, bool weight_first=False, "
        "bool swizzle=True) -> (Tensor, Tensor, Tensor)"
    ),
    # activation(gate) * up, quantized; activation: "silu" | "gelu_tanh"
    "act_and_mul_quant_fp8": (
        'act_and_mul_quant_fp8(Tensor gate, Tensor up, Tensor scale, str activation="silu") '
        "-> Tensor"
    ),
    "act_and_mul_quant_nvfp4": (
        "act_and_mul_quant_nvfp4(Tensor gate, Tensor up, Tensor global_scale, "
        'str activation="silu", bool swizzle=True) -> (Tensor, Tensor)'
    ),
}

for _schema in SCHEMAS.values():
    LIB.define(_schema)
