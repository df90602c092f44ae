// formats.h: scalar conversions of the quantized formats in docs/numerics.md (header-only).
//
// Shared by the quantization kernels (quant.cpp) and the fused attention kernels. Pure C++17,
// no torch headers; every function is inline and exact (bit arithmetic, no FP-env tricks).
// These names are stable; add new ones, do not rename:
//
//   namespace graphfuse::formats
//     float_to_e4m3(float v) -> uint8_t          rne, saturating to ±448 (also ±inf), NaN ->
//                                                 0x7F|sign, −0 -> 0x80, subnormals produced
//     e4m3_to_float(uint8_t b) -> float           kE4M3ToFloat[b] (table of 256; 0x7F/0xFF NaN)
//     kE4M3ToFloat                                the table itself (constexpr std::array)
//     e2m1_magnitude_code(float a) -> uint8_t     code 0..7 of |a| per docs/numerics.md (NaN -> 0)
//     float_to_e2m1(float v) -> uint8_t           sign bit of v (bit 3) | magnitude code
//     e2m1_to_float(uint8_t code) -> float        kE2M1ToFloat[code & 15]
//     kE2M1ToFloat                                the table itself (16 floats)
//     abs_bits(float v) -> uint32_t               |v| as bits; max over them is a NaN-sticky
//                                                 amax (NaN bits > inf bits > finite bits)
//     bits_to_float(uint32_t b) -> float
//     Nvfp4BlockScale {uint8_t sf; float inv;}
//     nvfp4_block_scale(float amax, float g)      sf = e4m3(g * (amax / 6.0f)) (0x7F if amax
//                                                 is NaN); inv = sf==0 ? 0 : 1/(float(sf)/g)
//     nvfp4_encode(float x, float inv) -> uint8_t q = e2m1(x * inv), sign taken from x, so
//                                                 x = ±0 gives ±0 even when inv = inf
//     round_up(int64_t a, int64_t b) -> int64_t
//     swizzled_scale_cols(int64_t k_blocks)       round_up(K/16, 4)
//     swizzled_scale_rows(int64_t m)              round_up(M, 128)
//     swizzled_scale_offset(m, k, n_ktiles)       flat byte offset of block scale (m, k) in
//                                                 the swizzled [round_up(M,128), round_up(K/16,4)]
//                                                 layout; n_ktiles = round_up(K/16, 4) / 4
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <limits>

namespace graphfuse {
namespace formats {

inline uint32_t float_bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof(b));
  return b;
}

inline float bits_to_float(uint32_t b) {
  float v;
  std::memcpy(&v, &b, sizeof(v));
  return v;
}

// |v| as bits. Unsigned max over these is an amax that propagates NaN.
inline uint32_t abs_bits(float v) { return float_bits(v) & 0x7FFFFFFFu; }

// ---------------------------------------------------------------------------------------
// FP8 e4m3 (float8_e4m3fn): bias 7, no infinities, NaN = S.1111.111, max 448.

// float -> e4m3 byte: rne, saturating (|v| >= 448 and ±inf give ±448), NaN -> 0x7F|sign.
inline uint8_t float_to_e4m3(float v) {
  const uint32_t bits = float_bits(v);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t a = bits & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7F;  // NaN
  if (a >= 0x43E00000u) return sign | 0x7E;  // |v| >= 448 (inf too): saturate
  if (a < 0x3C800000u) {                     // |v| < 2^-6: e4m3 subnormal, q = rne(|v| * 2^9)
    const uint32_t e = a >> 23;
    if (e < 117) return sign;  // |v| * 2^9 < 2^-1 (fp32 zeros/denormals too): rounds to 0
    const uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;  // |v| * 2^9 = mant * 2^(e - 141)
    const uint32_t shift = 141u - e;                    // 21..24
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;  // q == 8 is the min normal, 0x08
    return sign | static_cast<uint8_t>(q);
  }
  // Normal: fp32 exponent 121..135 -> e4m3 exponent 1..15; rne the 23-bit mantissa to 3 bits.
  const uint32_t r = (a + 0x7FFFFu + ((a >> 20) & 1u)) >> 20;
  return sign | static_cast<uint8_t>(r - (120u << 3));
}

constexpr float e4m3_value(int code) {
  const int e = (code >> 3) & 15;
  const int m = code & 7;
  float mag = 0.0f;
  if (e == 15 && m == 7) {
    mag = std::numeric_limits<float>::quiet_NaN();
  } else if (e == 0) {
    mag = static_cast<float>(m) / 512.0f;  // m * 2^-9
  } else {
    mag = static_cast<float>(8 + m) / 1024.0f;  // (1 + m/8) * 2^(e - 7)
    for (int i = 0; i < e; ++i) mag *= 2.0f;
  }
  return (code & 0x80) ? -mag : mag;
}

constexpr std::array<float, 256> make_e4m3_table() {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) t[c] = e4m3_value(c);
  return t;
}

inline constexpr std::array<float, 256> kE4M3ToFloat = make_e4m3_table();

inline float e4m3_to_float(uint8_t b) { return kE4M3ToFloat[b]; }

// ---------------------------------------------------------------------------------------
// e2m1 (FP4): code bits s e e m, magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6.

inline constexpr std::array<float, 16> kE2M1ToFloat = {
    0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
    -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

inline float e2m1_to_float(uint8_t code) { return kE2M1ToFloat[code & 15u]; }

// Magnitude code (0..7) of |a| by the docs/numerics.md table (rne between codes, saturating at 6;
// inf gives 7). NaN gives 0 (every comparison is false).
inline uint8_t e2m1_magnitude_code(float v) {
  const float a = bits_to_float(abs_bits(v));
  return static_cast<uint8_t>((a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) +
                              (a > 2.5f) + (a >= 3.5f) + (a > 5.0f));
}

// float -> e2m1 nibble: the sign bit of v in bit 3, the magnitude code in bits 0..2.
inline uint8_t float_to_e2m1(float v) {
  return static_cast<uint8_t>(((float_bits(v) >> 28) & 0x8u) | e2m1_magnitude_code(v));
}

// ---------------------------------------------------------------------------------------
// NVFP4 blocks of 16: e4m3 block scale, encode global scale g.

struct Nvfp4BlockScale {
  uint8_t sf;  // e4m3 byte of the block scale (0x7F when the block holds a NaN)
  float inv;   // multiplier applied to the block's values before e2m1
};

// amax: max |x_i| of the block with NaN propagated (e.g. bits_to_float(max of abs_bits)).
inline Nvfp4BlockScale nvfp4_block_scale(float amax, float g) {
  if (amax != amax) return {0x7F, std::numeric_limits<float>::quiet_NaN()};
  const uint8_t sf = float_to_e4m3(g * (amax / 6.0f));
  const float sf_f = e4m3_to_float(sf);
  const float inv = (sf_f == 0.0f) ? 0.0f : 1.0f / (sf_f / g);
  return {sf, inv};
}

// One element: e2m1(x * inv) with the sign of x (inv >= 0), so x = ±0 gives ±0 also when
// inv = inf (0 * inf is NaN, whose magnitude code is 0).
inline uint8_t nvfp4_encode(float x, float inv) {
  return static_cast<uint8_t>(((float_bits(x) >> 28) & 0x8u) | e2m1_magnitude_code(x * inv));
}

// ---------------------------------------------------------------------------------------
// Swizzled block-scale layout: tiles of 128 rows x 4 scale columns, each stored [32][4][4].

inline int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }
inline int64_t swizzled_scale_rows(int64_t m) { return round_up(m, 128); }
inline int64_t swizzled_scale_cols(int64_t k_blocks) { return round_up(k_blocks, 4); }

// Flat byte offset of the scale of row m, block column k; n_ktiles = round_up(K/16, 4) / 4.
inline int64_t swizzled_scale_offset(int64_t m, int64_t k, int64_t n_ktiles) {
  return ((m / 128) * n_ktiles + (k / 4)) * 512 + (m % 32) * 16 + ((m % 128) / 32) * 4 + (k % 4);
}

}  // namespace formats
}  // namespace graphfuse
