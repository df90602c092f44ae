// CPU kernels of the quantization ops (docs/numerics.md): graphfuse::fp8_static_quant,
// fp8_dequant, nvfp4_quant, nvfp4_dequant. Schemas live in graphfuse/ops/_library.py.
//
// Inputs of any rank and strides are read in place, row by row (a row is the last dim);
// a row whose last-dim stride is not 1 is gathered chunk by chunk into a small stack
// buffer. nvfp4_dequant copies non-contiguous `packed` / `block_scale` (uint8, 1/4 and
// 1/32 of the output bytes) with .contiguous(). Scales are read once with .item().
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "formats.h"
#include "quant_rows.h"
#include "quant_simd.h"

namespace graphfuse {
namespace {

using namespace formats;
using quant::dispatch_float;
using quant::read_scale;

constexpr int64_t kChunk = 4096;       // elements per task span (a multiple of 16)
constexpr int64_t kGrainElems = 32768;  // elements per parallel work item, at least

// ---------------------------------------------------------------------------------------
// Argument checks

void check_cpu(const char* op, const at::Tensor& x) {
  TORCH_CHECK(x.device().is_cpu(), op, ": the CPU kernel got an input on ", x.device());
}

void check_float_input(const char* op, const at::Tensor& x) {
  const auto t = x.scalar_type();
  TORCH_CHECK(t == at::kFloat || t == at::kBFloat16 || t == at::kHalf, op,
              ": x must be float32, bfloat16 or float16, got ", t);
}

void check_out_dtype(const char* op, at::ScalarType t) {
  TORCH_CHECK(t == at::kFloat || t == at::kBFloat16 || t == at::kHalf, op,
              ": dtype must be float32, bfloat16 or float16, got ", t);
}

// ---------------------------------------------------------------------------------------
// Row walker: a tensor seen as [rows, cols] (cols = last dim), read through its strides.

struct Rows {
  int64_t rows = 1, cols = 1, col_stride = 1;
  c10::SmallVector<int64_t, 6> sizes, strides;  // leading dims

  explicit Rows(const at::Tensor& x) {
    if (x.dim() == 0) return;
    cols = x.size(-1);
    col_stride = x.stride(-1);
    for (int64_t d = 0; d + 1 < x.dim(); ++d) {
      sizes.push_back(x.size(d));
      strides.push_back(x.stride(d));
      rows *= x.size(d);
    }
  }

  int64_t row_offset(int64_t m) const {
    int64_t off = 0;
    for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
      off += (m % sizes[d]) * strides[d];
      m /= sizes[d];
    }
    return off;
  }
};

// Calls fn(m, c0, ptr, n) for every span [c0, c0 + n) of every row m, in parallel; ptr points
// at n contiguous elements (the tensor itself, or a gathered copy when the last-dim stride
// is not 1). Spans start at multiples of kChunk.
template <typename T, typename Fn>
void for_each_span(const at::Tensor& x, Fn&& fn) {
  const Rows w(x);
  if (w.rows == 0 || w.cols == 0) return;
  const T* data = x.const_data_ptr<T>();
  const int64_t nchunks = (w.cols + kChunk - 1) / kChunk;
  const int64_t span = std::min(w.cols, kChunk);
  const int64_t grain = std::max<int64_t>(1, kGrainElems / span);
  at::parallel_for(0, w.rows * nchunks, grain, [&](int64_t begin, int64_t end) {
    T buf[kChunk];
    for (int64_t t = begin; t < end; ++t) {
      const int64_t m = t / nchunks;
      const int64_t c0 = (t % nchunks) * kChunk;
      const int64_t n = std::min(kChunk, w.cols - c0);
      const T* p = data + w.row_offset(m) + c0 * w.col_stride;
      if (w.col_stride != 1 && n > 1) {
        for (int64_t j = 0; j < n; ++j) buf[j] = p[j * w.col_stride];
        p = buf;
      }
      fn(m, c0, p, n);
    }
  });
}

// ---------------------------------------------------------------------------------------
// FP8 static quantization

at::Tensor fp8_static_quant(const at::Tensor& x, const at::Tensor& scale) {
  constexpr const char* op = "graphfuse::fp8_static_quant";
  check_cpu(op, x);
  check_float_input(op, x);
  const float inv = 1.0f / read_scale(op, "scale", scale, x);
  at::Tensor out = at::empty(x.sizes(), x.options().dtype(at::kFloat8_e4m3fn));
  const quant::Fp8Rows rows{reinterpret_cast<uint8_t*>(out.data_ptr()),
                            x.dim() == 0 ? 1 : x.size(-1), inv};
  dispatch_float(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    for_each_span<T>(x, [&](int64_t m, int64_t c0, const T* p, int64_t n) {
      rows.put(m, c0, p, n);
    });
  });
  return out;
}

at::Tensor fp8_dequant(const at::Tensor& q, const at::Tensor& scale, at::ScalarType dtype) {
  constexpr const char* op = "graphfuse::fp8_dequant";
  check_cpu(op, q);
  TORCH_CHECK(q.scalar_type() == at::kFloat8_e4m3fn, op, ": x must be float8_e4m3fn, got ",
              q.scalar_type());
  check_out_dtype(op, dtype);
  const float s = read_scale(op, "scale", scale, q);
  at::Tensor out = at::empty(q.sizes(), q.options().dtype(dtype));
  const int64_t cols = q.dim() == 0 ? 1 : q.size(-1);
  const at::Tensor bytes = q.view(at::kByte);
  dispatch_float(dtype, [&](auto tag) {
    using O = decltype(tag);
    O* o = out.data_ptr<O>();
    for_each_span<uint8_t>(bytes, [&](int64_t m, int64_t c0, const uint8_t* p, int64_t n) {
      simd::fp8_decode_span(p, o + m * cols + c0, n, s);
    });
  });
  return out;
}

// ---------------------------------------------------------------------------------------
// NVFP4

std::tuple<at::Tensor, at::Tensor> nvfp4_quant(const at::Tensor& x, const at::Tensor& g_t,
                                               bool swizzle) {
  constexpr const char* op = "graphfuse::nvfp4_quant";
  check_cpu(op, x);
  check_float_input(op, x);
  TORCH_CHECK(x.dim() >= 1, op, ": x must have rank >= 1, got shape ", x.sizes());
  const int64_t K = x.size(-1);
  TORCH_CHECK(K > 0 && K % 16 == 0, op, ": the last dim K must be a positive multiple of 16, got K=",
              K, " (shape ", x.sizes(), ")");
  const float g = read_scale(op, "global_scale", g_t, x);
  const int64_t M = x.numel() / K;
  const int64_t kb = K / 16;
  at::Tensor packed = at::empty({M, K / 2}, x.options().dtype(at::kByte));
  at::Tensor scales = swizzle ? at::empty({swizzled_scale_rows(M), swizzled_scale_cols(kb)},
                                          x.options().dtype(at::kByte))
                              : at::empty({M, kb}, x.options().dtype(at::kByte));
  const quant::Nvfp4Rows rows{packed.data_ptr<uint8_t>(), scales.data_ptr<uint8_t>(), K, g,
                              swizzle};
  if (swizzle) quant::zero_scale_padding(rows.scales, M, kb);
  dispatch_float(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    for_each_span<T>(x, [&](int64_t m, int64_t c0, const T* p, int64_t n) {
      rows.put(m, c0, p, n);
    });
  });
  return {packed, scales.view(at::kFloat8_e4m3fn)};
}

at::Tensor nvfp4_dequant(const at::Tensor& packed_in, const at::Tensor& scale_in,
                         const at::Tensor& g_t, at::ScalarType dtype, bool swizzled) {
  constexpr const char* op = "graphfuse::nvfp4_dequant";
  check_cpu(op, packed_in);
  TORCH_CHECK(packed_in.scalar_type() == at::kByte, op, ": packed must be uint8, got ",
              packed_in.scalar_type());
  TORCH_CHECK(packed_in.dim() == 2, op, ": packed must be 2-D [M, K/2], got shape ",
              packed_in.sizes());
  TORCH_CHECK(scale_in.scalar_type() == at::kFloat8_e4m3fn, op,
              ": block_scale must be float8_e4m3fn, got ", scale_in.scalar_type());
  TORCH_CHECK(scale_in.device() == packed_in.device(), op, ": block_scale is on ",
              scale_in.device(), " but packed is on ", packed_in.device());
  check_out_dtype(op, dtype);
  const int64_t M = packed_in.size(0);
  const int64_t K = packed_in.size(1) * 2;
  TORCH_CHECK(K > 0 && K % 16 == 0, op, ": K = 2 * packed.size(1) must be a positive multiple ",
              "of 16, got K=", K, " (packed shape ", packed_in.sizes(), ")");
  const int64_t kb = K / 16;
  const int64_t want_r = swizzled ? swizzled_scale_rows(M) : M;
  const int64_t want_c = swizzled ? swizzled_scale_cols(kb) : kb;
  TORCH_CHECK(scale_in.dim() == 2 && scale_in.size(0) == want_r && scale_in.size(1) == want_c,
              op, ": block_scale must have shape [", want_r, ", ", want_c, "] for packed shape ",
              packed_in.sizes(), " (swizzled=", swizzled, "), got ", scale_in.sizes());
  const float g = read_scale(op, "global_scale", g_t, packed_in);
  at::Tensor out = at::empty({M, K}, packed_in.options().dtype(dtype));
  if (M == 0) return out;
  const at::Tensor packed = packed_in.contiguous();
  const at::Tensor scales = scale_in.contiguous();
  const uint8_t* pk = packed.const_data_ptr<uint8_t>();
  const uint8_t* sc = reinterpret_cast<const uint8_t*>(scales.const_data_ptr());
  const int64_t n_ktiles = swizzled_scale_cols(kb) / 4;
  dispatch_float(dtype, [&](auto tag) {
    using O = decltype(tag);
    O* o = out.data_ptr<O>();
    const int64_t grain = std::max<int64_t>(1, kGrainElems / 16);
    at::parallel_for(0, M * kb, grain, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        const int64_t m = b / kb, k = b % kb;
        const uint8_t sf = sc[swizzled ? swizzled_scale_offset(m, k, n_ktiles) : m * kb + k];
        simd::nvfp4_decode_block(pk + b * 8, e4m3_to_float(sf), g, o + b * 16);
      }
    });
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(graphfuse, CPU, m) {
  m.impl("fp8_static_quant", &fp8_static_quant);
  m.impl("fp8_dequant", &fp8_dequant);
  m.impl("nvfp4_quant", &nvfp4_quant);
  m.impl("nvfp4_dequant", &nvfp4_dequant);
}

}  // namespace graphfuse
