// norm_act_simd.h: the element math of norm_act.cpp, AVX2 (8 lanes), AVX-512 (16 lanes, the
// activation only) and scalar, all bit-exact with graphfuse/ops/norm_act_ref.py. Every step
// is one IEEE fp32 operation; the file that includes this header turns off multiply-add
// contraction before including it.
//
//   RoundTo {kF32, kBF16, kF16}; round_to(v, to)   v rounded (rne) to a dtype, back as fp32
//   exp_ref(v)                                     norm_act_ref.exp_ref
//   act_ref(v, gelu)                               silu(v), or gelu_tanh(v) when gelu
//   LaneSums                                       norm_act_ref.sum_squares_ref: 16 lanes,
//                                                  add(i, v) then total()
//   avx512_usable()                                AVX2 builds: the CPU has AVX-512 F/BW/DQ/VL
//                                                  and torch's CPU capability is AVX512 (not
//                                                  lowered by ATEN_CPU_CAPABILITY)
//   avx512::act_and_mul(gate, up, n, gelu, to, z)  z[i] = round(round(act(gate[i])) * up[i])
//                                                  in 16 lanes for i < n - n % 16; returns
//                                                  n - n % 16 (GRAPHFUSE_AVX512 functions)
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <ATen/Version.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "formats.h"
#include "quant_simd.h"

namespace graphfuse {
namespace normact {

enum class RoundTo { kF32, kBF16, kF16 };

// The constants of norm_act_ref.py, each a double rounded once to fp32 (as PyTorch rounds a
// Python float it multiplies an fp32 tensor by).
constexpr float kExpLo = -104.0f, kExpHi = 89.0f;
constexpr float kLog2e = static_cast<float>(1.44269504088896341);
constexpr float kLn2Hi = static_cast<float>(0.693359375);
constexpr float kLn2Lo = static_cast<float>(-2.12194440e-4);
constexpr float kP0 = static_cast<float>(1.9875691500e-4), kP1 = static_cast<float>(1.3981999507e-3),
                kP2 = static_cast<float>(8.3334519073e-3), kP3 = static_cast<float>(4.1665795894e-2),
                kP4 = static_cast<float>(1.6666665459e-1), kP5 = static_cast<float>(5.0000001201e-1);
constexpr float kGeluBeta2 = static_cast<float>(1.5957691216057308);
constexpr float kGeluKappa = static_cast<float>(0.044715);

inline float round_to(float v, RoundTo to) {
  switch (to) {
    case RoundTo::kBF16: return static_cast<float>(c10::BFloat16(v));
    case RoundTo::kF16: return static_cast<float>(c10::Half(v));
    default: return v;
  }
}

// 2^k for an integer k in [-126, 127].
inline float pow2(int32_t k) {
  return formats::bits_to_float(static_cast<uint32_t>(k + 127) << 23);
}

inline float exp_ref(float v) {
  v = v < kExpLo ? kExpLo : v;  // NaN passes both comparisons unchanged
  v = v > kExpHi ? kExpHi : v;
  const float n = std::nearbyint(v * kLog2e);
  float r = v - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float p = r * kP0 + kP1;
  p = p * r + kP2;
  p = p * r + kP3;
  p = p * r + kP4;
  p = p * r + kP5;
  float y = p * (r * r);
  y = y + r;
  y = y + 1.0f;
  const int32_t ni = (n == n) ? static_cast<int32_t>(n) : 0;  // y is NaN then anyway
  const int32_t n1 = ni >> 1;                                  // floor(n / 2)
  return y * pow2(n1) * pow2(ni - n1);
}

inline float act_ref(float v, bool gelu) {
  const float k = gelu ? (v + ((v * v) * v) * kGeluKappa) * kGeluBeta2 : v;
  return v / (1.0f + exp_ref(-k));
}

#ifdef GRAPHFUSE_AVX2

inline __m256 round_to(__m256 v, RoundTo to) {
  if (to == RoundTo::kBF16) {  // rne to the top 16 bits; NaN -> 0x7FC0 (as c10::BFloat16)
    const __m256i b = _mm256_castps_si256(v);
    __m256i r = _mm256_add_epi32(b, _mm256_set1_epi32(0x7FFF));
    r = _mm256_add_epi32(r, _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1)));
    r = _mm256_and_si256(r, _mm256_set1_epi32(static_cast<int32_t>(0xFFFF0000u)));
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    return _mm256_blendv_ps(_mm256_castsi256_ps(r),
                            _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000)), nan);
  }
  if (to == RoundTo::kF16) {
    return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  return v;
}

inline __m256 pow2(__m256i k) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
}

inline __m256 exp_ref(__m256 v) {
  // max/min return their second operand when one is NaN: v stays NaN
  v = _mm256_min_ps(_mm256_set1_ps(kExpHi), _mm256_max_ps(_mm256_set1_ps(kExpLo), v));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(v, _mm256_set1_ps(kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_sub_ps(v, _mm256_mul_ps(n, _mm256_set1_ps(kLn2Hi)));
  r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(kLn2Lo)));
  __m256 p = _mm256_add_ps(_mm256_mul_ps(r, _mm256_set1_ps(kP0)), _mm256_set1_ps(kP1));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(kP2));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(kP3));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(kP4));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(kP5));
  __m256 y = _mm256_mul_ps(p, _mm256_mul_ps(r, r));
  y = _mm256_add_ps(y, r);
  y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
  // A NaN n (from a NaN v) converts to INT_MIN; y is that NaN then and the products keep it.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  return _mm256_mul_ps(_mm256_mul_ps(y, pow2(n1)), pow2(_mm256_sub_epi32(ni, n1)));
}

inline __m256 act_ref(__m256 v, bool gelu) {
  __m256 k = v;
  if (gelu) {
    const __m256 cube = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
    k = _mm256_add_ps(v, _mm256_mul_ps(cube, _mm256_set1_ps(kGeluKappa)));
    k = _mm256_mul_ps(k, _mm256_set1_ps(kGeluBeta2));
  }
  const __m256 neg = _mm256_xor_ps(k, _mm256_set1_ps(-0.0f));
  return _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0f), exp_ref(neg)));
}

// ---------------------------------------------------------------------------------------
// AVX-512: the same operations in 16 lanes, for the activation (bound by the latency of the
// exp chain, so twice the lanes per instruction pays even where 512-bit operations take two
// 256-bit cycles). Compiled function by function for that target (GRAPHFUSE_AVX512) inside
// the AVX2 build; called only when avx512_usable().

#define GRAPHFUSE_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))

inline bool avx512_usable() {
  static const bool usable = __builtin_cpu_supports("avx512f") &&
                             __builtin_cpu_supports("avx512bw") &&
                             __builtin_cpu_supports("avx512dq") &&
                             __builtin_cpu_supports("avx512vl") &&
                             at::get_cpu_capability() == "AVX512";
  return usable;
}

namespace avx512 {

GRAPHFUSE_AVX512 inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
GRAPHFUSE_AVX512 inline __m512 load16(const c10::BFloat16* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
GRAPHFUSE_AVX512 inline __m512 load16(const c10::Half* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

GRAPHFUSE_AVX512 inline __m512 round_to(__m512 v, RoundTo to) {
  if (to == RoundTo::kBF16) {  // rne to the top 16 bits; NaN -> 0x7FC0 (as c10::BFloat16)
    const __m512i b = _mm512_castps_si512(v);
    __m512i r = _mm512_add_epi32(b, _mm512_set1_epi32(0x7FFF));
    r = _mm512_add_epi32(r, _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1)));
    r = _mm512_and_si512(r, _mm512_set1_epi32(static_cast<int32_t>(0xFFFF0000u)));
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_mask_mov_ps(_mm512_castsi512_ps(r), nan,
                              _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)));
  }
  if (to == RoundTo::kF16) {
    return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  return v;
}

GRAPHFUSE_AVX512 inline __m512 exp_ref(__m512 v) {
  // max/min return their second operand when one is NaN: v stays NaN
  v = _mm512_min_ps(_mm512_set1_ps(kExpHi), _mm512_max_ps(_mm512_set1_ps(kExpLo), v));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_sub_ps(v, _mm512_mul_ps(n, _mm512_set1_ps(kLn2Hi)));
  r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(kLn2Lo)));
  __m512 p = _mm512_add_ps(_mm512_mul_ps(r, _mm512_set1_ps(kP0)), _mm512_set1_ps(kP1));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(kP2));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(kP3));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(kP4));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(kP5));
  __m512 y = _mm512_mul_ps(p, _mm512_mul_ps(r, r));
  y = _mm512_add_ps(y, r);
  y = _mm512_add_ps(y, _mm512_set1_ps(1.0f));
  // y * 2^n rounded once, as y * 2^n1 * 2^(n - n1) is (the first product is exact); a NaN y
  // stays that NaN.
  return _mm512_scalef_ps(y, n);
}

GRAPHFUSE_AVX512 inline __m512 act_ref(__m512 v, bool gelu) {
  __m512 k = v;
  if (gelu) {
    const __m512 cube = _mm512_mul_ps(_mm512_mul_ps(v, v), v);
    k = _mm512_add_ps(v, _mm512_mul_ps(cube, _mm512_set1_ps(kGeluKappa)));
    k = _mm512_mul_ps(k, _mm512_set1_ps(kGeluBeta2));
  }
  const __m512 neg = _mm512_xor_ps(k, _mm512_set1_ps(-0.0f));
  return _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0f), exp_ref(neg)));
}

template <typename T>
GRAPHFUSE_AVX512 int64_t act_and_mul(const T* gate, const T* up, int64_t n, bool gelu,
                                     RoundTo to, float* z) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 a = round_to(act_ref(load16(gate + j), gelu), to);
    _mm512_storeu_ps(z + j, round_to(_mm512_mul_ps(a, load16(up + j)), to));
  }
  return j;
}

// z[i] = round(table[bits of gate[i]] * up[i]) in 16 lanes for i < n - n % 16; returns
// n - n % 16 (T = c10::BFloat16 or c10::Half).
template <typename T>
GRAPHFUSE_AVX512 int64_t table_and_mul(const T* gate, const T* up, int64_t n, const float* table,
                                       RoundTo to, float* z) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(gate + j));
    const __m512 a = _mm512_i32gather_ps(_mm512_cvtepu16_epi32(bits), table, 4);
    _mm512_storeu_ps(z + j, round_to(_mm512_mul_ps(a, load16(up + j)), to));
  }
  return j;
}

}  // namespace avx512

#endif  // GRAPHFUSE_AVX2

// Sum of squares in 16 lanes: lane i % 16 adds v_i * v_i in order of i; total() adds the
// lanes as the tree l + (l + 8), then + 4, + 2, + 1.
struct LaneSums {
#ifdef GRAPHFUSE_AVX2
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();  // lanes 0..7, 8..15
  void add16(__m256 v0, __m256 v1) {
    lo = _mm256_add_ps(lo, _mm256_mul_ps(v0, v0));
    hi = _mm256_add_ps(hi, _mm256_mul_ps(v1, v1));
  }
#endif
  float lane[16] = {};
  bool spilled = false;

  // the vector lanes into lane[] (before scalar adds)
  void spill() {
#ifdef GRAPHFUSE_AVX2
    if (!spilled) {
      _mm256_storeu_ps(lane, lo);
      _mm256_storeu_ps(lane + 8, hi);
    }
#endif
    spilled = true;
  }
  void add(int64_t i, float v) {
    spill();
    lane[i & 15] = lane[i & 15] + v * v;
  }
  float total() {
    spill();
    float t[8];
    for (int l = 0; l < 8; ++l) t[l] = lane[l] + lane[l + 8];
    for (int l = 0; l < 4; ++l) t[l] = t[l] + t[l + 4];
    for (int l = 0; l < 2; ++l) t[l] = t[l] + t[l + 2];
    return t[0] + t[1];
  }
};

}  // namespace normact
}  // namespace graphfuse
