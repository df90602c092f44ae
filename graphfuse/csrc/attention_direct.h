// attention_direct.h: the decode-sized Q·Kᵀ kernel of the CPU fused attention kernel. It reads
// K rows in place through a row loader (SrcRows<K>, attention_simd.h) and takes dot products
// along D, for tasks whose rows fit one register panel: every K element is then converted
// exactly once and no transposed fp32 K tile is written (attention_kernel.cpp picks it for
// R <= 4 rows, D % 16 == 0; P·V of such tasks is gemm_micro over SrcRows<K>).
#pragma once

#include <cstdint>

#include "attention_simd.h"

namespace graphfuse {
namespace attn {

#ifdef GRAPHFUSE_ATTN_AVX2
// Sums of each of 8 vectors, as one vector (lane i = sum of v[i]).
inline __m256 hsum8(const __m256 (&v)[8]) {
  const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}
#endif

// S[r][j] = Q[r] · K[j] for r < MR <= 4 and keys j < n, K row j read through the loader k
// (D % 16 == 0): the decode path, where a transposed fp32 K tile would cost more than the
// products. Only columns j < n are written.
template <int MR, typename Rows>
inline void qk_rows(const float* __restrict q, int64_t ldq, const Rows& k, int64_t D, int64_t n,
                    float* __restrict s, int64_t lds) {
  static_assert(MR >= 1 && MR <= 4, "qk_rows: at most 4 rows");
#ifdef GRAPHFUSE_ATTN_AVX2
  for (int64_t j = 0; j < n; j += 2) {
    const int64_t j1 = j + 1 < n ? j + 1 : j;
    __m256 acc[8];
    for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
    for (int64_t d = 0; d < D; d += 16) {
      __m256 a0, a1, b0, b1;
      k.load16(j, d, a0, a1);
      k.load16(j1, d, b0, b1);
#pragma GCC unroll 4
      for (int r = 0; r < MR; ++r) {
        const __m256 x0 = _mm256_loadu_ps(q + r * ldq + d);
        const __m256 x1 = _mm256_loadu_ps(q + r * ldq + d + 8);
        acc[2 * r] = _mm256_fmadd_ps(x1, a1, _mm256_fmadd_ps(x0, a0, acc[2 * r]));
        acc[2 * r + 1] = _mm256_fmadd_ps(x1, b1, _mm256_fmadd_ps(x0, b0, acc[2 * r + 1]));
      }
    }
    alignas(32) float sums[8];
    _mm256_store_ps(sums, hsum8(acc));
    for (int r = 0; r < MR; ++r) {
      s[r * lds + j] = sums[2 * r];
      if (j + 1 < n) s[r * lds + j + 1] = sums[2 * r + 1];
    }
  }
#else
  float buf[16];
  for (int64_t j = 0; j < n; ++j) {
    for (int r = 0; r < MR; ++r) s[r * lds + j] = 0.0f;
    for (int64_t d = 0; d < D; d += 16) {
      const float* row = k.row16(j, d, buf);
      for (int r = 0; r < MR; ++r)
        for (int c = 0; c < 16; ++c) s[r * lds + j] += q[r * ldq + d + c] * row[c];
    }
  }
#endif
}

}  // namespace attn
}  // namespace graphfuse
