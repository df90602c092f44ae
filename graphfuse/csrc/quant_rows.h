// quant_rows.h: what the quantizing CPU ops share (quant.cpp: fp8_static_quant, nvfp4_quant;
// norm_act.cpp: the norm / activation + quant ops): reading a scale argument, the float dtype
// dispatch, and the writers of the FP8 and NVFP4 outputs, which take a row's values a span at
// a time and encode them with quant_simd.h.
//
//   read_scale(op, name, s, x) -> float   the one element of s, checked finite and > 0
//   dispatch_float(dtype, fn)             fn(T{}) for T = float, c10::BFloat16, c10::Half
//   Fp8Rows {data, cols, inv}             put(m, c0, p, n): row m, columns c0 .. c0 + n of an
//                                         [M, cols] e4m3 tensor = e4m3(p[i] * inv)
//   Nvfp4Rows {packed, scales, cols, g, swizzle}
//                                         put(m, c0, p, n): the n / 16 blocks from column c0
//                                         (c0, n multiples of 16) of row m: packed [M, cols/2],
//                                         their e4m3 block scales at (m, c0/16 ..) of the
//                                         swizzled or the linear [M, cols/16] layout
//   zero_scale_padding(scales, M, kb)     the padding rows / columns of a swizzled layout = 0
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "formats.h"
#include "quant_simd.h"

namespace graphfuse {
namespace quant {

inline float read_scale(const char* op, const char* name, const at::Tensor& s,
                        const at::Tensor& x) {
  TORCH_CHECK(s.numel() == 1, op, ": ", name, " must have exactly one element, got shape ",
              s.sizes(), " (", s.numel(), " elements)");
  TORCH_CHECK(at::isFloatingType(s.scalar_type()), op, ": ", name,
              " must have a floating dtype, got ", s.scalar_type());
  TORCH_CHECK(s.device() == x.device(), op, ": ", name, " is on ", s.device(),
              " but the input is on ", x.device());
  const float v = s.to(at::kFloat).item<float>();
  TORCH_CHECK(std::isfinite(v) && v > 0.0f, op, ": ", name, " must be finite and > 0, got ", v);
  return v;
}

template <typename Fn>
void dispatch_float(at::ScalarType t, Fn&& fn) {
  switch (t) {
    case at::kFloat: return fn(float{});
    case at::kBFloat16: return fn(c10::BFloat16{});
    case at::kHalf: return fn(c10::Half{});
    default: TORCH_CHECK(false, "graphfuse: unsupported dtype ", t);
  }
}

struct Fp8Rows {
  uint8_t* data;
  int64_t cols;
  float inv;  // 1 / scale

  template <typename T>
  void put(int64_t m, int64_t c0, const T* p, int64_t n) const {
    simd::fp8_encode_span(p, data + m * cols + c0, n, inv);
  }
};

struct Nvfp4Rows {
  uint8_t* packed;
  uint8_t* scales;
  int64_t cols;  // K, a multiple of 16
  float g;       // the encode global scale
  bool swizzle;

  template <typename T>
  void put(int64_t m, int64_t c0, const T* p, int64_t n) const {
    const int64_t kb = cols / 16, k0 = c0 / 16, nb = n / 16;
    uint8_t* out = packed + m * (cols / 2) + c0 / 2;
    if (!swizzle) {
      simd::nvfp4_encode_blocks(p, nb, out, scales + m * kb + k0, g);
      return;
    }
    // swizzled: encode up to kPiece blocks with their scales in a buffer, then place them
    constexpr int64_t kPiece = 64;
    const int64_t n_ktiles = formats::swizzled_scale_cols(kb) / 4;
    uint8_t sf[kPiece];
    for (int64_t b0 = 0; b0 < nb; b0 += kPiece) {
      const int64_t len = std::min(kPiece, nb - b0);
      simd::nvfp4_encode_blocks(p + 16 * b0, len, out + 8 * b0, sf, g);
      for (int64_t i = 0; i < len; ++i) {
        scales[formats::swizzled_scale_offset(m, k0 + b0 + i, n_ktiles)] = sf[i];
      }
    }
  }
};

inline void zero_scale_padding(uint8_t* scales, int64_t M, int64_t kb) {
  const int64_t mp = formats::swizzled_scale_rows(M), kp = formats::swizzled_scale_cols(kb);
  const int64_t n_ktiles = kp / 4;
  for (int64_t m = 0; m < mp; ++m) {
    for (int64_t k = (m < M ? kb : 0); k < kp; ++k) {
      scales[formats::swizzled_scale_offset(m, k, n_ktiles)] = 0;
    }
  }
}

}  // namespace quant
}  // namespace graphfuse
