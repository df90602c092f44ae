// attention.h: the problem description shared by the fused attention ops (attention.cpp:
// argument checks, output allocation, registration) and the CPU kernel (attention_kernel.cpp).
#pragma once

#include <cstdint>

#include "attention_simd.h"

namespace graphfuse {
namespace attn {

enum class OutKind { F32, BF16, F16, FP8, NVFP4 };
enum class Causal { None, TopLeft, BottomRight };

// A [B, H, S, D] input read in place (stride of D is 1).
struct Operand {
  const void* ptr = nullptr;
  InKind kind = InKind::F32;
  int64_t sb = 0, sh = 0, ss = 0;
};

struct Problem {
  int64_t B = 0, Hq = 0, Hkv = 0, Sq = 0, Skv = 0, D = 0;
  Operand q, k, v;
  float qk_log2 = 1.0f;  // q_scale * k_scale * softmax_scale * log2(e)
  float v_scale = 1.0f;

  // Mask broadcast to [B, Hq, Sq, Skv] (strides may be 0); nullptr when absent.
  const void* mask = nullptr;
  bool mask_bool = false;
  InKind mask_kind = InKind::F32;
  int64_t mb = 0, mh = 0, mi = 0, mj = 0;

  Causal causal = Causal::None;
  int64_t causal_off = 0;  // key j is visible to query i iff j <= i + causal_off

  OutKind out = OutKind::F32;
  void* out_ptr = nullptr;  // element (b, h, i, d) at out_index(...)
  bool out_bhsd = true;     // memory order [B, H, S, D] (else [B, S, H, D])
  float out_inv = 1.0f;     // FP8: 1 / s_o
  float g = 1.0f;           // NVFP4: encode global scale
  uint8_t* scale_ptr = nullptr;  // NVFP4: swizzled block scales
  int64_t nvfp4_k = 0, n_ktiles = 0;

  int64_t out_index(int64_t b, int64_t h, int64_t i) const {
    return out_bhsd ? ((b * Hq + h) * Sq + i) * D : ((b * Sq + i) * Hq + h) * D;
  }
};

// Runs the fused kernel (at::parallel_for over batch x kv head x query block).
void run_attention(const Problem& p);

}  // namespace attn
}  // namespace graphfuse
