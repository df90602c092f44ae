// attention_simd.h: the vectorised building blocks of the CPU fused attention kernel
// (attention_kernel.cpp): input conversion to fp32 (16/32-bit loads, the exact e4m3 decoder
// of quant_simd.h), an 8x8 transpose for K, the K/V row loaders (F32Rows: an fp32 tile,
// SrcRows<K>: the source rows), the one register-blocked micro-kernel gemm_micro (MR rows x 16
// columns) that both Q·Kᵀ and P·V run on, and a vector exp2. The decode-sized Q·Kᵀ by row dot
// products is in attention_direct.h; the output encoders come from quant_simd.h.
//
// AVX2 + FMA + F16C intrinsics when the compiler targets them (setup.py passes -mavx2 -mfma
// -mf16c on x86); plain loops otherwise (same results up to fp32 accumulation order).
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "formats.h"
#include "quant_simd.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define GRAPHFUSE_ATTN_AVX2 1
#endif

namespace graphfuse {
namespace attn {

// Element types the kernel reads (q/k/v and additive masks).
enum class InKind { F32, BF16, F16, E4M3 };

inline int64_t elem_size(InKind kind) {
  return kind == InKind::F32 ? 4 : (kind == InKind::E4M3 ? 1 : 2);
}

inline float load_one(const void* src, InKind kind, int64_t i) {
  switch (kind) {
    case InKind::F32:
      return static_cast<const float*>(src)[i];
    case InKind::BF16:
      return static_cast<float>(static_cast<const c10::BFloat16*>(src)[i]);
    case InKind::F16:
      return static_cast<float>(static_cast<const c10::Half*>(src)[i]);
    case InKind::E4M3:
      return formats::e4m3_to_float(static_cast<const uint8_t*>(src)[i]);
  }
  return 0.0f;
}

#ifdef GRAPHFUSE_ATTN_AVX2
// 8 consecutive elements of kind K as fp32 (quant_simd.h's loaders and exact e4m3 decoder).
template <InKind K>
inline __m256 load8(const void* src, int64_t i) {
  if constexpr (K == InKind::F32) {
    return simd::load8(static_cast<const float*>(src) + i);
  } else if constexpr (K == InKind::BF16) {
    return simd::load8(static_cast<const c10::BFloat16*>(src) + i);
  } else if constexpr (K == InKind::F16) {
    return simd::load8(static_cast<const c10::Half*>(src) + i);
  } else {
    return simd::e4m3_decode8(static_cast<const uint8_t*>(src) + i);
  }
}

// 16 consecutive elements of kind K as fp32, from element i.
template <InKind K>
inline void load16(const void* src, int64_t i, __m256& lo, __m256& hi) {
  if constexpr (K == InKind::E4M3) {
    simd::e4m3_decode16(static_cast<const uint8_t*>(src) + i, lo, hi);
  } else {
    lo = load8<K>(src, i);
    hi = load8<K>(src, i + 8);
  }
}
#endif

// dst[0:n] = float(src[0:n]) for a source of kind K.
template <InKind K>
inline void load_row_t(const void* src, int64_t n, float* dst) {
  int64_t i = 0;
#ifdef GRAPHFUSE_ATTN_AVX2
  for (; i + 16 <= n; i += 16) {
    __m256 lo, hi;
    load16<K>(src, i, lo, hi);
    _mm256_storeu_ps(dst + i, lo);
    _mm256_storeu_ps(dst + i + 8, hi);
  }
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load8<K>(src, i));
#endif
  for (; i < n; ++i) dst[i] = load_one(src, K, i);
}

// Calls fn(std::integral_constant<InKind, kind>()).
template <typename Fn>
inline void with_kind(InKind kind, Fn&& fn) {
  switch (kind) {
    case InKind::F32: fn(std::integral_constant<InKind, InKind::F32>()); break;
    case InKind::BF16: fn(std::integral_constant<InKind, InKind::BF16>()); break;
    case InKind::F16: fn(std::integral_constant<InKind, InKind::F16>()); break;
    case InKind::E4M3: fn(std::integral_constant<InKind, InKind::E4M3>()); break;
  }
}

// dst[0:n] = float(src[0:n]).
inline void load_row(const void* src, InKind kind, int64_t n, float* dst) {
  with_kind(kind, [&](auto k) { load_row_t<decltype(k)::value>(src, n, dst); });
}

#ifdef GRAPHFUSE_ATTN_AVX2
// In-register 8x8 transpose; row c of the result is stored at dst + c * ldd.
inline void transpose8_store(const __m256 (&r)[8], float* dst, int64_t ldd) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(dst + 0 * ldd, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(dst + 1 * ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(dst + 2 * ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(dst + 3 * ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(dst + 4 * ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(dst + 5 * ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(dst + 6 * ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(dst + 7 * ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
}
#endif

// Kt[d * ldk + j] = float(K row j)[d] for j < n (rows n..round_up(n, 8) are zero), d < d8.
// K rows start at src + j * row_bytes; d8 = round_up(D, 8); scratch holds 8 * d8 floats.
template <InKind K>
inline void load_k_transposed_t(const char* src, int64_t row_bytes, int64_t n, int64_t D,
                                float* kt, int64_t ldk, float* scratch) {
  const int64_t d8 = formats::round_up(D, 8);
#ifdef GRAPHFUSE_ATTN_AVX2
  if (D == d8) {
    for (int64_t j0 = 0; j0 < n; j0 += 8) {
      const int64_t rows = n - j0 < 8 ? n - j0 : 8;
      for (int64_t d0 = 0; d0 < D; d0 += 8) {
        __m256 r[8];
        for (int i = 0; i < 8; ++i)
          r[i] = i < rows ? load8<K>(src + (j0 + i) * row_bytes, d0) : _mm256_setzero_ps();
        transpose8_store(r, kt + d0 * ldk + j0, ldk);
      }
    }
    return;
  }
#endif
  for (int64_t j0 = 0; j0 < n; j0 += 8) {
    for (int64_t i = 0; i < 8; ++i) {
      float* row = scratch + i * d8;
      std::fill(row, row + d8, 0.0f);
      if (j0 + i < n) load_row_t<K>(src + (j0 + i) * row_bytes, D, row);
    }
    for (int64_t i = 0; i < 8; ++i)
      for (int64_t d = 0; d < d8; ++d) kt[d * ldk + j0 + i] = scratch[i * d8 + d];
  }
}

inline void load_k_transposed(const char* src, int64_t row_bytes, InKind kind, int64_t n,
                              int64_t D, float* kt, int64_t ldk, float* scratch) {
  with_kind(kind, [&](auto k) {
    load_k_transposed_t<decltype(k)::value>(src, row_bytes, n, D, kt, ldk, scratch);
  });
}

// K/V row loaders of the micro-kernels: 16 consecutive fp32 values of row j from column d.
// F32Rows reads an fp32 tile (ld floats per row); SrcRows<K> reads the source rows (kind K,
// row_bytes apart) and converts in registers. row16 is the scalar form: a pointer to the 16
// values (into the tile, or into buf after conversion).
struct F32Rows {
  const float* base;
  int64_t ld;
#ifdef GRAPHFUSE_ATTN_AVX2
  void load16(int64_t j, int64_t d, __m256& lo, __m256& hi) const {
    lo = _mm256_loadu_ps(base + j * ld + d);
    hi = _mm256_loadu_ps(base + j * ld + d + 8);
  }
#endif
  const float* row16(int64_t j, int64_t d, float*) const { return base + j * ld + d; }
};

template <InKind K>
struct SrcRows {
  const char* base;
  int64_t row_bytes;
#ifdef GRAPHFUSE_ATTN_AVX2
  void load16(int64_t j, int64_t d, __m256& lo, __m256& hi) const {
    attn::load16<K>(base + j * row_bytes, d, lo, hi);
  }
#endif
  const float* row16(int64_t j, int64_t d, float* buf) const {
    load_row_t<K>(base + j * row_bytes + d * elem_size(K), 16, buf);
    return buf;
  }
};

// The register-blocked micro-kernel of both products: C[MR][16] = C * alpha[r] (0 when alpha
// is null) + A[MR][0:n] · B[0:n][d0:d0+16], B's rows read through the loader `b`.
//   Q·Kᵀ: A = Q, B = the transposed fp32 K tile (F32Rows), alpha null;
//   P·V:  A = P, B = V as an fp32 tile (F32Rows) or its source rows (SrcRows<K>).
template <int MR, typename Rows>
inline void gemm_micro(const float* __restrict a, int64_t lda, const Rows& b, int64_t d0,
                       int64_t n, const float* __restrict alpha, float* __restrict c,
                       int64_t ldc) {
#ifdef GRAPHFUSE_ATTN_AVX2
  __m256 acc[MR][2];
  if (alpha) {
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m256 s = _mm256_broadcast_ss(alpha + r);
      acc[r][0] = _mm256_mul_ps(s, _mm256_loadu_ps(c + r * ldc));
      acc[r][1] = _mm256_mul_ps(s, _mm256_loadu_ps(c + r * ldc + 8));
    }
  } else {
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  }
  for (int64_t j = 0; j < n; ++j) {
    __m256 b0, b1;
    b.load16(j, d0, b0, b1);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m256 x = _mm256_broadcast_ss(a + r * lda + j);
      acc[r][0] = _mm256_fmadd_ps(x, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(x, b1, acc[r][1]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    _mm256_storeu_ps(c + r * ldc, acc[r][0]);
    _mm256_storeu_ps(c + r * ldc + 8, acc[r][1]);
  }
#else
  for (int r = 0; r < MR; ++r)
    for (int k = 0; k < 16; ++k) c[r * ldc + k] = alpha ? c[r * ldc + k] * alpha[r] : 0.0f;
  float buf[16];
  for (int64_t j = 0; j < n; ++j) {
    const float* row = b.row16(j, d0, buf);
    for (int r = 0; r < MR; ++r)
      for (int k = 0; k < 16; ++k) c[r * ldc + k] += a[r * lda + j] * row[k];
  }
#endif
}

#ifdef GRAPHFUSE_ATTN_AVX2
// 2^x for a vector: rel. error ~2 ulp; 0 for x < -126 (and -inf); NaN stays NaN.
inline __m256 exp2_ps(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-126.0f);
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(127.0f));
  const __m256 fx = _mm256_round_ps(xc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(xc, fx);
  __m256 p = _mm256_set1_ps(1.535336188319500e-4f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.339887440266574e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618437357674640e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550332471162809e-2f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402264791363012e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931472028550421e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
  __m256 r = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  r = _mm256_andnot_ps(under, r);
  return _mm256_blendv_ps(r, x, nan);
}
#endif

// In place over a logit row already in the log2 domain (n8 = n rounded up to 8; entries
// [n, n8) must be -inf): p = 2^(t - m); returns the sum of p.
inline float exp2_row(float* t, int64_t n8, float m) {
  int64_t j = 0;
  float sum = 0.0f;
#ifdef GRAPHFUSE_ATTN_AVX2
  const __m256 mv = _mm256_set1_ps(m);
  __m256 acc = _mm256_setzero_ps();
  for (; j + 8 <= n8; j += 8) {
    const __m256 p = exp2_ps(_mm256_sub_ps(_mm256_loadu_ps(t + j), mv));
    _mm256_storeu_ps(t + j, p);
    acc = _mm256_add_ps(acc, p);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  for (float x : lanes) sum += x;
#endif
  for (; j < n8; ++j) {
    t[j] = std::exp2(t[j] - m);
    sum += t[j];
  }
  return sum;
}

// t[0:n] *= c.
inline void scale_row(float* t, int64_t n, float c) {
  int64_t j = 0;
#ifdef GRAPHFUSE_ATTN_AVX2
  const __m256 cv = _mm256_set1_ps(c);
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(t + j, _mm256_mul_ps(_mm256_loadu_ps(t + j), cv));
#endif
  for (; j < n; ++j) t[j] *= c;
}

// max of t[0:n] (NaN-dropping; a NaN logit still poisons its row through exp2).
inline float max_row(const float* t, int64_t n) {
  int64_t j = 0;
  float mx = -INFINITY;
#ifdef GRAPHFUSE_ATTN_AVX2
  __m256 acc = _mm256_set1_ps(-INFINITY);
  for (; j + 8 <= n; j += 8) acc = _mm256_max_ps(_mm256_loadu_ps(t + j), acc);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  for (float x : lanes) mx = x > mx ? x : mx;
#endif
  for (; j < n; ++j) mx = t[j] > mx ? t[j] : mx;
  return mx;
}

}  // namespace attn
}  // namespace graphfuse
