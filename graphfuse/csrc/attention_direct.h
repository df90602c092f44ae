// attention_direct.h: decode-sized micro-kernels of the CPU fused attention kernel that read
// K and V rows in place (FP8/16/32-bit) and convert them in registers, for tasks whose rows fit
// one register panel: every K/V element is then converted exactly once and no fp32 tile is
// written (attention_kernel.cpp picks them for R <= 4 rows (Q·Kᵀ) / R <= 6 (P·V), D % 16 == 0).
#pragma once

#include <cstdint>

#include "attention_simd.h"

namespace graphfuse {
namespace attn {

#ifdef GRAPHFUSE_ATTN_AVX2
// 16 consecutive elements of kind K at element offset d (E4M3: value * 2^-8).
template <InKind K>
inline void load16(const char* row, int64_t d, __m256& lo, __m256& hi) {
  if constexpr (K == InKind::E4M3) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + d));
    lo = e4m3x8_from_u16(_mm_cvtepu8_epi16(b));
    hi = e4m3x8_from_u16(_mm_cvtepu8_epi16(_mm_srli_si128(b, 8)));
  } else {
    lo = load8<K>(row, d);
    hi = load8<K>(row, d + 8);
  }
}

// Sums of each of 8 vectors, as one vector (lane i = sum of v[i]).
inline __m256 hsum8(const __m256 (&v)[8]) {
  const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}
#endif

// S[r][j] = Q[r] · K[j] for r < MR <= 4 and keys j < n read straight from their rows (kind K,
// row_bytes apart; D % 16 == 0), converted in registers: the decode path, where a transposed
// fp32 K tile would cost more than the products. Only columns j < n are written.
template <int MR, InKind K>
inline void qk_rows_src(const float* __restrict q, int64_t ldq, const char* k, int64_t row_bytes,
                        int64_t D, int64_t n, float* __restrict s, int64_t lds) {
  static_assert(MR >= 1 && MR <= 4, "qk_rows_src: at most 4 rows");
#ifdef GRAPHFUSE_ATTN_AVX2
  for (int64_t j = 0; j < n; j += 2) {
    const char* k0 = k + j * row_bytes;
    const char* k1 = j + 1 < n ? k0 + row_bytes : k0;
    __m256 acc[8];
    for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
    for (int64_t d = 0; d < D; d += 16) {
      __m256 a0, a1, b0, b1;
      load16<K>(k0, d, a0, a1);
      load16<K>(k1, d, b0, b1);
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
  float row[16];
  for (int64_t j = 0; j < n; ++j) {
    for (int r = 0; r < MR; ++r) s[r * lds + j] = 0.0f;
    for (int64_t d = 0; d < D; d += 16) {
      load_row_t<K>(k + j * row_bytes + d * elem_size(K), 16, row);
      for (int r = 0; r < MR; ++r)
        for (int c = 0; c < 16; ++c) s[r * lds + j] += q[r * ldq + d + c] * row[c];
    }
  }
#endif
}

// pv_micro reading V straight from its [Skv, D] rows (kind K, row_bytes apart), converting in
// registers: the decode path (all rows in one panel, so every V element is converted once).
template <int MR, InKind K>
inline void pv_micro_src(const float* __restrict p, int64_t ldp, const char* v, int64_t row_bytes,
                         int64_t d0, int64_t n, const float* __restrict alpha,
                         float* __restrict o, int64_t ldo) {
#ifdef GRAPHFUSE_ATTN_AVX2
  __m256 acc[MR][2];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    const __m256 a = _mm256_broadcast_ss(alpha + r);
    acc[r][0] = _mm256_mul_ps(a, _mm256_loadu_ps(o + r * ldo));
    acc[r][1] = _mm256_mul_ps(a, _mm256_loadu_ps(o + r * ldo + 8));
  }
  for (int64_t j = 0; j < n; ++j) {
    __m256 b0, b1;
    if constexpr (K == InKind::E4M3) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v + j * row_bytes + d0));
      b0 = e4m3x8_from_u16(_mm_cvtepu8_epi16(b));
      b1 = e4m3x8_from_u16(_mm_cvtepu8_epi16(_mm_srli_si128(b, 8)));
    } else {
      b0 = load8<K>(v + j * row_bytes, d0);
      b1 = load8<K>(v + j * row_bytes, d0 + 8);
    }
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m256 a = _mm256_broadcast_ss(p + r * ldp + j);
      acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    _mm256_storeu_ps(o + r * ldo, acc[r][0]);
    _mm256_storeu_ps(o + r * ldo + 8, acc[r][1]);
  }
#else
  float row[16];
  for (int r = 0; r < MR; ++r)
    for (int c = 0; c < 16; ++c) o[r * ldo + c] *= alpha[r];
  for (int64_t j = 0; j < n; ++j) {
    const char* src = v + j * row_bytes + d0 * elem_size(K);
    load_row_t<K>(src, 16, row);
    for (int r = 0; r < MR; ++r)
      for (int c = 0; c < 16; ++c) o[r * ldo + c] += p[r * ldp + j] * row[c];
  }
#endif
}

}  // namespace attn
}  // namespace graphfuse
