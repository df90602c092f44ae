// quant_simd.h: the inner loops of quant.cpp, AVX2 where available, with the scalar
// functions of formats.h for the tails and for other CPUs. Both paths are bit-exact with
// formats.h (the tests compare bytes against the pure-PyTorch reference).
//
//   fp8_encode_span(p, out, n, inv)      out[i] = e4m3(float(p[i]) * inv), i < n
//   nvfp4_encode_block(p, out8, g) -> sf one block of 16: 8 packed bytes (element 2j in the
//                                        low nibble of byte j), returns the e4m3 scale byte
//   nvfp4_encode_blocks(p, nb, out, sf, g) nb consecutive blocks: 8 * nb packed bytes at out,
//                                        nb scale bytes at sf (AVX2: the scales of up to 64
//                                        blocks first, 8 to a vector, then their codes)
//   fp8_decode_span(p, out, n, scale)    out[i] = O(e4m3_to_float(p[i]) * scale), rne to O
//   nvfp4_decode_block(p8, sf, g, out16) out[i] = O((e2m1_to_float(code_i) * sf) / g)
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Float8_e4m3fn.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "formats.h"

#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
#include <immintrin.h>
#define GRAPHFUSE_AVX2 1
#endif

namespace graphfuse {
namespace simd {

using namespace formats;

template <typename T>
inline float to_float(T v) {
  return static_cast<float>(v);
}
inline float to_float(c10::Float8_e4m3fn v) { return e4m3_to_float(v.x); }

#ifdef GRAPHFUSE_AVX2

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const c10::BFloat16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline __m256 load8(const c10::Half* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

inline __m256i splat(int32_t v) { return _mm256_set1_epi32(v); }

// 8 lanes of formats::float_to_e4m3, one byte per int32 lane.
inline __m256i e4m3_encode8(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i a = _mm256_and_si256(bits, splat(0x7FFFFFFF));
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(bits, 24), splat(0x80));
  // normal: rne the mantissa to 3 bits, rebias the exponent
  __m256i r = _mm256_add_epi32(a, splat(0x7FFFF));
  r = _mm256_add_epi32(r, _mm256_and_si256(_mm256_srli_epi32(a, 20), splat(1)));
  r = _mm256_sub_epi32(_mm256_srli_epi32(r, 20), splat(120 << 3));
  // subnormal (|v| < 2^-6): rne(|v| * 2^9), an exact product, rounded explicitly
  const __m256 s = _mm256_round_ps(_mm256_mul_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(512.0f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256i is_sub = _mm256_cmpgt_epi32(splat(0x3C800000), a);
  r = _mm256_blendv_epi8(r, _mm256_cvttps_epi32(s), is_sub);
  r = _mm256_blendv_epi8(r, splat(0x7E), _mm256_cmpgt_epi32(a, splat(0x43DFFFFF)));  // >= 448
  r = _mm256_blendv_epi8(r, splat(0x7F), _mm256_cmpgt_epi32(a, splat(0x7F800000)));  // NaN
  return _mm256_or_si256(r, sign);
}

// The low byte of each int32 lane, in order, as 8 bytes.
inline uint64_t pack_low_bytes(__m256i v) {
  const __m256i shuf = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                        -1, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                        -1, -1);
  const __m256i t = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(v, shuf),
                                                _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1));
  return static_cast<uint64_t>(_mm_cvtsi128_si64(_mm256_castsi256_si128(t)));
}

// 8 lanes of formats::nvfp4_encode: sign of x (bit 3) | magnitude code of a = |x * inv|
// (NaN: 0, as the scalar code). code(a) = min(rint(2a), rint(a) + 2, rint(a / 2) + 4, 7): the
// e2m1 grid steps by 0.5, 1, 2 on [0, 2), [2, 4), [4, 6], and each rint(y) + k is the single
// rounding of y + k + M with M = 1.5 * 2^23 (an FMA where y = 2a or a / 2; sums in
// [2^23, 2^24) are integers, rne), so the code is the low 3 bits of the smallest sum. Equal to
// the threshold form for every fp32 product (checked over all 2^32 bit patterns).
inline __m256i e2m1_encode8(__m256 x, __m256 inv) {
  constexpr float kM = 12582912.0f;  // 1.5 * 2^23
  const __m256 abs_prod =
      _mm256_and_ps(_mm256_mul_ps(x, inv), _mm256_castsi256_ps(splat(0x7FFFFFFF)));
  const __m256 a = _mm256_max_ps(abs_prod, _mm256_setzero_ps());  // NaN -> 0 (2nd operand)
  __m256 t = _mm256_min_ps(_mm256_fmadd_ps(a, _mm256_set1_ps(2.0f), _mm256_set1_ps(kM)),
                           _mm256_add_ps(a, _mm256_set1_ps(kM + 2.0f)));
  t = _mm256_min_ps(t, _mm256_fmadd_ps(a, _mm256_set1_ps(0.5f), _mm256_set1_ps(kM + 4.0f)));
  t = _mm256_min_ps(t, _mm256_set1_ps(kM + 7.0f));
  const __m256i code = _mm256_and_si256(_mm256_castps_si256(t), splat(7));
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 28), splat(8));
  return _mm256_or_si256(code, sign);
}

// Codes of elements 2j, 2j+1 (int32 lanes) -> byte j = low | high << 4; 4 bytes.
inline uint32_t pack_nibbles(__m256i codes) {
  const __m256i t = _mm256_or_si256(codes, _mm256_srli_epi64(codes, 28));
  const __m256i shuf = _mm256_setr_epi8(0, 8, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                        -1, 0, 8, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                        -1, -1);
  const __m256i s = _mm256_shuffle_epi8(t, shuf);  // lane 0: bytes 0,1; lane 1: bytes 2,3
  const uint32_t lo = static_cast<uint32_t>(_mm256_cvtsi256_si32(s)) & 0xFFFFu;
  const uint32_t hi = static_cast<uint32_t>(_mm256_extract_epi32(s, 4)) & 0xFFFFu;
  return lo | (hi << 16);
}

// The codes of 4 blocks (c[2b], c[2b + 1]: elements 0..7 and 8..15 of block b) -> their 32
// packed bytes at out. Codes are narrowed to bytes, each (even, odd) byte pair becomes
// even + 16 * odd (maddubs), and the 16-bit halves of the two 128-bit lanes are interleaved
// back into element order.
inline void pack_nibbles4(const __m256i c[8], uint8_t* out) {
  const __m256i k = _mm256_set1_epi16(0x1001);  // bytes 1, 16
  const __m256i b01 = _mm256_maddubs_epi16(
      _mm256_packus_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3])), k);
  const __m256i b23 = _mm256_maddubs_epi16(
      _mm256_packus_epi16(_mm256_packs_epi32(c[4], c[5]), _mm256_packs_epi32(c[6], c[7])), k);
  // lane 0: per block, bytes 0, 1, 4, 5; lane 1: bytes 2, 3, 6, 7 (blocks 0..3 in order)
  const __m256i v = _mm256_packus_epi16(b01, b23);
  const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_unpacklo_epi16(lo, hi));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16), _mm_unpackhi_epi16(lo, hi));
}

inline uint32_t hmax_epu32(__m256i v) {
  __m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
  return static_cast<uint32_t>(_mm_cvtsi128_si32(m));
}

// Lane-wise unsigned max of each of a[0..7] -> lane b holds the max over the 8 lanes of a[b].
inline __m256i hmax8_epu32(const __m256i a[8]) {
  const auto pairs = [](__m256i x, __m256i y) {  // per 128-bit lane: x02, y02, x13, y13
    return _mm256_max_epu32(_mm256_unpacklo_epi32(x, y), _mm256_unpackhi_epi32(x, y));
  };
  const auto quads = [](__m256i x, __m256i y) {  // per 128-bit lane: the max of 4 of each
    return _mm256_max_epu32(_mm256_unpacklo_epi64(x, y), _mm256_unpackhi_epi64(x, y));
  };
  const __m256i u = quads(pairs(a[0], a[1]), pairs(a[2], a[3]));
  const __m256i v = quads(pairs(a[4], a[5]), pairs(a[6], a[7]));
  return _mm256_max_epu32(_mm256_permute2x128_si256(u, v, 0x20),
                          _mm256_permute2x128_si256(u, v, 0x31));
}

inline void store8(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
inline void store8(c10::Half* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                   _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
// fp32 -> bf16 with rne, NaN -> 0x7FC0 (as c10::BFloat16).
inline void store8(c10::BFloat16* p, __m256 v) {
  const __m256i b = _mm256_castps_si256(v);
  __m256i r = _mm256_add_epi32(b, splat(0x7FFF));
  r = _mm256_srli_epi32(_mm256_add_epi32(r, _mm256_and_si256(_mm256_srli_epi32(b, 16), splat(1))),
                        16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  r = _mm256_blendv_epi8(r, splat(0x7FC0), nan);
  const __m256i w = _mm256_packus_epi32(r, r);  // lanes: [0..3, 0..3 | 4..7, 4..7]
  const __m256i o = _mm256_permute4x64_epi64(w, _MM_SHUFFLE(3, 1, 2, 0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(o));
}

// Non-temporal variants for 32-byte (float) / 16-byte (16-bit) aligned p; callers _mm_sfence.
inline void stream8(float* p, __m256 v) { _mm256_stream_ps(p, v); }
template <typename O>
inline void stream8(O* p, __m256 v) {
  alignas(16) O tmp[8];
  store8(tmp, v);
  _mm_stream_si128(reinterpret_cast<__m128i*>(p), _mm_load_si128(reinterpret_cast<__m128i*>(tmp)));
}

// formats::e4m3_to_float, vectorised and bit-exact (the one e4m3 decoder of the CPU kernels;
// the attention kernel reads FP8 K/V through it too). The e4m3 bits placed in an fp16 (sign,
// then exponent and mantissa shifted left by 7) are exactly value * 2^-8, subnormals and -0
// included; F16C widens them exactly and * 2^8 is exact in fp32. NaN codes (0x7F / 0xFF)
// become the fp16 quiet NaN 0x7E00 | sign, i.e. the table's ±quiet NaN (0x7FC00000 | sign).
// e4m3 codes in 16-bit lanes -> the fp16 bit patterns of value * 2^-8.
inline __m256i e4m3_half_bits(__m256i x) {
  const __m256i mag = _mm256_and_si256(x, _mm256_set1_epi16(0x7F));
  const __m256i nan = _mm256_cmpeq_epi16(mag, _mm256_set1_epi16(0x7F));
  const __m256i h = _mm256_or_si256(_mm256_andnot_si256(nan, _mm256_slli_epi16(mag, 7)),
                                    _mm256_and_si256(nan, _mm256_set1_epi16(0x7E00)));
  return _mm256_or_si256(h, _mm256_slli_epi16(_mm256_and_si256(x, _mm256_set1_epi16(0x80)), 8));
}

inline __m256 half_bits_to_e4m3_value(__m128i h) {
  return _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(256.0f));
}

// 8 e4m3 bytes at p -> 8 floats.
inline __m256 e4m3_decode8(const uint8_t* p) {
  const __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return half_bits_to_e4m3_value(
      _mm256_castsi256_si128(e4m3_half_bits(_mm256_castsi128_si256(b))));
}

// 16 e4m3 bytes at p -> bytes 0..7 in lo, 8..15 in hi.
inline void e4m3_decode16(const uint8_t* p, __m256& lo, __m256& hi) {
  const __m256i h = e4m3_half_bits(
      _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  lo = half_bits_to_e4m3_value(_mm256_castsi256_si128(h));
  hi = half_bits_to_e4m3_value(_mm256_extracti128_si256(h, 1));
}

// e4m3 codes (0..255) in int32 lanes -> their 8 values.
inline __m256 e4m3_decode8(__m256i codes) {
  const __m256i w = _mm256_permute4x64_epi64(_mm256_packus_epi32(codes, codes),
                                             _MM_SHUFFLE(3, 1, 2, 0));  // 16-bit codes 0..7
  return half_bits_to_e4m3_value(_mm256_castsi256_si128(e4m3_half_bits(w)));
}

// formats::nvfp4_block_scale of 8 blocks at once: amax bits (NaN-sticky) -> the e4m3 scale
// bytes in int32 lanes (sf) and the multipliers (inv), lane for lane the scalar results.
inline void nvfp4_block_scale8(__m256i amax_bits, float g, __m256i& sf, __m256& inv) {
  const __m256 amax = _mm256_castsi256_ps(amax_bits), vg = _mm256_set1_ps(g);
  const __m256 nan = _mm256_cmp_ps(amax, amax, _CMP_UNORD_Q);
  sf = e4m3_encode8(_mm256_mul_ps(vg, _mm256_div_ps(amax, _mm256_set1_ps(6.0f))));
  sf = _mm256_blendv_epi8(sf, splat(0x7F), _mm256_castps_si256(nan));
  const __m256 sf_f = e4m3_decode8(sf);  // NaN for 0x7F, so inv is NaN then
  const __m256 zero = _mm256_cmp_ps(sf_f, _mm256_setzero_ps(), _CMP_EQ_OQ);
  inv = _mm256_andnot_ps(zero, _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_div_ps(sf_f, vg)));
}

// 8 e2m1 values from 4 packed bytes (element 2j: low nibble of byte j).
inline __m256 e2m1_decode8(uint32_t word) {
  const __m256i c = _mm256_and_si256(
      _mm256_srlv_epi32(splat(static_cast<int32_t>(word)), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
      splat(15));
  const __m256 mag = _mm256_permutevar8x32_ps(_mm256_loadu_ps(kE2M1ToFloat.data()), c);
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, splat(8)), 28);
  return _mm256_or_ps(mag, _mm256_castsi256_ps(sign));
}

#endif  // GRAPHFUSE_AVX2

template <typename T>
inline void fp8_encode_span(const T* p, uint8_t* out, int64_t n, float inv) {
  int64_t i = 0;
#ifdef GRAPHFUSE_AVX2
  const __m256 vinv = _mm256_set1_ps(inv);
  for (; i + 8 <= n; i += 8) {
    const uint64_t b = pack_low_bytes(e4m3_encode8(_mm256_mul_ps(load8(p + i), vinv)));
    std::memcpy(out + i, &b, 8);
  }
#endif
  for (; i < n; ++i) out[i] = float_to_e4m3(to_float(p[i]) * inv);
}

template <typename T>
inline uint8_t nvfp4_encode_block(const T* p, uint8_t* out8, float g) {
#ifdef GRAPHFUSE_AVX2
  const __m256 x0 = load8(p), x1 = load8(p + 8);
  const __m256i abs_mask = splat(0x7FFFFFFF);
  const __m256i amax8 = _mm256_max_epu32(_mm256_and_si256(_mm256_castps_si256(x0), abs_mask),
                                         _mm256_and_si256(_mm256_castps_si256(x1), abs_mask));
  const Nvfp4BlockScale bs = nvfp4_block_scale(bits_to_float(hmax_epu32(amax8)), g);
  const __m256 inv = _mm256_set1_ps(bs.inv);
  const uint64_t packed = static_cast<uint64_t>(pack_nibbles(e2m1_encode8(x0, inv))) |
                          (static_cast<uint64_t>(pack_nibbles(e2m1_encode8(x1, inv))) << 32);
  std::memcpy(out8, &packed, 8);
  return bs.sf;
#else
  float x[16];
  uint32_t amax = 0;
  for (int i = 0; i < 16; ++i) {
    x[i] = to_float(p[i]);
    const uint32_t a = abs_bits(x[i]);
    amax = a > amax ? a : amax;
  }
  const Nvfp4BlockScale bs = nvfp4_block_scale(bits_to_float(amax), g);
  for (int j = 0; j < 8; ++j) {
    out8[j] = static_cast<uint8_t>(nvfp4_encode(x[2 * j], bs.inv) |
                                   (nvfp4_encode(x[2 * j + 1], bs.inv) << 4));
  }
  return bs.sf;
#endif
}

#ifdef GRAPHFUSE_AVX2
// The scales of 8 consecutive blocks of 16: 8 scale bytes at sf, their multipliers at inv.
template <typename T>
inline void nvfp4_scales8(const T* p, uint8_t* sf, float* inv, float g) {
  const __m256i abs_mask = splat(0x7FFFFFFF);
  __m256i amax[8];
  for (int b = 0; b < 8; ++b) {
    amax[b] = _mm256_max_epu32(_mm256_and_si256(_mm256_castps_si256(load8(p + 16 * b)), abs_mask),
                               _mm256_and_si256(_mm256_castps_si256(load8(p + 16 * b + 8)), abs_mask));
  }
  __m256i sf_bytes;
  __m256 inv8;
  nvfp4_block_scale8(hmax8_epu32(amax), g, sf_bytes, inv8);
  const uint64_t sfb = pack_low_bytes(sf_bytes);
  std::memcpy(sf, &sfb, 8);
  _mm256_storeu_ps(inv, inv8);
}

// 4 consecutive blocks of 16 with their multipliers inv[0..3]: 32 packed bytes at out.
template <typename T>
inline void nvfp4_codes4(const T* p, const float* inv, uint8_t* out) {
  __m256i c[8];
  for (int b = 0; b < 4; ++b) {
    const __m256 inv_b = _mm256_broadcast_ss(inv + b);
    c[2 * b] = e2m1_encode8(load8(p + 16 * b), inv_b);
    c[2 * b + 1] = e2m1_encode8(load8(p + 16 * b + 8), inv_b);
  }
  pack_nibbles4(c, out);
}
#endif

// Up to kScalePiece blocks at a time: first every block's scale (8 blocks per vector, so the
// scale's division chain of one group overlaps the next group's), then the codes.
template <typename T>
inline void nvfp4_encode_blocks(const T* p, int64_t nb, uint8_t* out, uint8_t* sf, float g) {
  int64_t b = 0;
#ifdef GRAPHFUSE_AVX2
  constexpr int64_t kScalePiece = 64;
  alignas(32) float inv[kScalePiece];
  while (nb - b >= 8) {
    const int64_t len = std::min(kScalePiece, (nb - b) / 8 * 8);
    for (int64_t i = 0; i < len; i += 8) nvfp4_scales8(p + 16 * (b + i), sf + b + i, inv + i, g);
    for (int64_t i = 0; i < len; i += 4) nvfp4_codes4(p + 16 * (b + i), inv + i, out + 8 * (b + i));
    b += len;
  }
#endif
  for (; b < nb; ++b) sf[b] = nvfp4_encode_block(p + 16 * b, out + 8 * b, g);
}

template <typename O>
inline void fp8_decode_span(const uint8_t* p, O* out, int64_t n, float scale) {
  int64_t i = 0;
#ifdef GRAPHFUSE_AVX2
  const __m256 s = _mm256_set1_ps(scale);
  if (reinterpret_cast<uintptr_t>(out) % (8 * sizeof(O)) == 0) {  // output bypasses the cache
    for (; i + 8 <= n; i += 8) stream8(out + i, _mm256_mul_ps(e4m3_decode8(p + i), s));
    _mm_sfence();
  }
  for (; i + 8 <= n; i += 8) store8(out + i, _mm256_mul_ps(e4m3_decode8(p + i), s));
#endif
  for (; i < n; ++i) out[i] = static_cast<O>(e4m3_to_float(p[i]) * scale);
}

template <typename O>
inline void nvfp4_decode_block(const uint8_t* p8, float sf, float g, O* out) {
#ifdef GRAPHFUSE_AVX2
  const __m256 s = _mm256_set1_ps(sf), vg = _mm256_set1_ps(g);
  uint32_t w[2];
  std::memcpy(w, p8, 8);
  store8(out, _mm256_div_ps(_mm256_mul_ps(e2m1_decode8(w[0]), s), vg));
  store8(out + 8, _mm256_div_ps(_mm256_mul_ps(e2m1_decode8(w[1]), s), vg));
#else
  for (int j = 0; j < 8; ++j) {
    out[2 * j] = static_cast<O>((e2m1_to_float(p8[j] & 15) * sf) / g);
    out[2 * j + 1] = static_cast<O>((e2m1_to_float(p8[j] >> 4) * sf) / g);
  }
#endif
}

}  // namespace simd
}  // namespace graphfuse
