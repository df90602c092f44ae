// CPU kernels of the norm / activation + static quant ops (docs/numerics.md, "Norm and
// activation fused with a static quant"): graphfuse::rms_norm_quant_fp8 / _nvfp4, their add_
// variants (residual in, the sum out), act_and_mul_quant_fp8 / _nvfp4. Schemas live in
// graphfuse/ops/_library.py; graphfuse/ops/norm_act_ref.py is the reference they match bit
// for bit.
//
// One task per block of rows. A row is read once from memory: RMSNorm's first loop adds the
// residual (writing the sum), and sums the squares; its second loop reads the row again from
// cache and quantizes it 512 values at a time through a stack buffer with the encoders of
// quant_simd.h. No fp32 tensor is allocated. Inputs are viewed as [M, K] (a copy only when
// the leading dims cannot be merged or the last dim is strided). GRAPHFUSE_POISON_OUTPUTS=1
// fills the outputs with 0xFF bytes first, so that a byte the kernel misses shows in tests.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>

// The kernels match the reference operation by operation: no multiply-add contraction.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "formats.h"
#include "norm_act_simd.h"
#include "quant_rows.h"
#include "quant_simd.h"

namespace graphfuse {
namespace {

using formats::swizzled_scale_cols;
using formats::swizzled_scale_offset;
using formats::swizzled_scale_rows;
using normact::RoundTo;
using quant::dispatch_float;
using quant::read_scale;

constexpr int64_t kBlock = 512;        // values quantized per encoder call (32 NVFP4 blocks)
constexpr int64_t kGrainElems = 32768;  // elements per parallel work item, at least

// ---------------------------------------------------------------------------------------
// Arguments

bool poison_outputs() {
  const char* env = std::getenv("GRAPHFUSE_POISON_OUTPUTS");
  return env != nullptr && std::strcmp(env, "1") == 0;
}

at::Tensor new_output(at::IntArrayRef sizes, const at::Tensor& like, at::ScalarType dtype) {
  at::Tensor out = at::empty(sizes, like.options().dtype(dtype));
  if (poison_outputs() && out.numel() > 0) out.view(at::kByte).fill_(0xFF);
  return out;
}

bool is_float(at::ScalarType t) { return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf; }

void check_input(const char* op, const char* name, const at::Tensor& x) {
  TORCH_CHECK(x.device().is_cpu(), op, ": the CPU kernel got ", name, " on ", x.device());
  TORCH_CHECK(is_float(x.scalar_type()), op, ": ", name,
              " must be float32, bfloat16 or float16, got ", x.scalar_type());
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, op, ": ", name,
              " must have rank >= 1 and a non-empty last dim, got shape ", x.sizes());
}

RoundTo round_kind(at::ScalarType t) {
  return t == at::kBFloat16 ? RoundTo::kBF16 : t == at::kHalf ? RoundTo::kF16 : RoundTo::kF32;
}

// x as [M, K] with unit stride along K (a view when the leading dims merge).
at::Tensor rows_of(const at::Tensor& x) {
  at::Tensor r = x.reshape({-1, x.size(-1)});
  return r.stride(1) == 1 ? r : r.contiguous();
}

// ---------------------------------------------------------------------------------------
// Outputs: a row's values arrive kBlock at a time as fp32 (already rounded to the dtype the
// graph quantizes) and go to quant::Fp8Rows / quant::Nvfp4Rows.

struct Nvfp4Tensors {
  at::Tensor packed, scales;
  quant::Nvfp4Rows out;
};

Nvfp4Tensors nvfp4_outputs(const char* op, const at::Tensor& x, int64_t M, int64_t K, float g,
                           bool swizzle) {
  TORCH_CHECK(K % 16 == 0, op, ": the last dim K must be a multiple of 16, got K=", K,
              " (shape ", x.sizes(), ")");
  const int64_t kb = K / 16;
  Nvfp4Tensors t;
  t.packed = new_output({M, K / 2}, x, at::kByte);
  t.scales = swizzle ? new_output({swizzled_scale_rows(M), swizzled_scale_cols(kb)}, x, at::kByte)
                     : new_output({M, kb}, x, at::kByte);
  t.out = {t.packed.data_ptr<uint8_t>(), t.scales.data_ptr<uint8_t>(), K, g, swizzle};
  if (swizzle) quant::zero_scale_padding(t.out.scales, M, kb);
  return t;
}

int64_t grain_rows(int64_t K) { return std::max<int64_t>(1, kGrainElems / K); }

// ---------------------------------------------------------------------------------------
// RMSNorm

struct NormArgs {
  float eps;
  RoundTo norm_round;     // x * rsqrt(...) rounded to norm_dtype
  RoundTo product_round;  // weight product rounded to promote(norm_dtype, weight dtype)
  bool weight_first;
};

// One row: h = x (+ residual, rounded to T and written to h_out), r = 1/sqrt(mean(h^2) + eps),
// z = weight * normalised (in the order NormArgs says), handed to out kBlock at a time.
template <typename T, typename W, typename Out>
void norm_row(const T* x, const T* res, T* h_out, const W* w, int64_t K, const NormArgs& a,
              const Out& out, int64_t m) {
  normact::LaneSums sums;
  const T* h = x;
  int64_t i = 0;
  if (res != nullptr) {
    h = h_out;
#ifdef GRAPHFUSE_AVX2
    for (; i + 16 <= K; i += 16) {
      simd::store8(h_out + i, _mm256_add_ps(simd::load8(x + i), simd::load8(res + i)));
      simd::store8(h_out + i + 8, _mm256_add_ps(simd::load8(x + i + 8), simd::load8(res + i + 8)));
      sums.add16(simd::load8(h_out + i), simd::load8(h_out + i + 8));
    }
#endif
    for (; i < K; ++i) {
      h_out[i] = static_cast<T>(static_cast<float>(x[i]) + static_cast<float>(res[i]));
      sums.add(i, static_cast<float>(h_out[i]));
    }
  } else {
#ifdef GRAPHFUSE_AVX2
    for (; i + 16 <= K; i += 16) sums.add16(simd::load8(h + i), simd::load8(h + i + 8));
#endif
    for (; i < K; ++i) sums.add(i, static_cast<float>(h[i]));
  }
  const float r = 1.0f / std::sqrt(sums.total() / static_cast<float>(K) + a.eps);
  alignas(32) float z[kBlock];
  for (int64_t c0 = 0; c0 < K; c0 += kBlock) {
    const int64_t n = std::min(kBlock, K - c0);
    int64_t j = 0;
#ifdef GRAPHFUSE_AVX2
    const __m256 rv = _mm256_set1_ps(r);
    for (; j + 8 <= n; j += 8) {
      const __m256 nv = _mm256_mul_ps(simd::load8(h + c0 + j), rv);
      const __m256 wv = simd::load8(w + c0 + j);
      const __m256 zv =
          a.weight_first
              ? normact::round_to(_mm256_mul_ps(nv, wv), a.norm_round)
              : normact::round_to(_mm256_mul_ps(wv, normact::round_to(nv, a.norm_round)),
                                  a.product_round);
      _mm256_store_ps(z + j, zv);
    }
#endif
    for (; j < n; ++j) {
      const float nv = static_cast<float>(h[c0 + j]) * r;
      const float wv = static_cast<float>(w[c0 + j]);
      z[j] = a.weight_first
                 ? normact::round_to(nv * wv, a.norm_round)
                 : normact::round_to(wv * normact::round_to(nv, a.norm_round), a.product_round);
    }
    out.put(m, c0, z, n);
  }
}

template <typename Out>
void norm_rows(const at::Tensor& x2, const at::Tensor* res2, at::Tensor* h_out,
               const at::Tensor& weight, const NormArgs& a, const Out& out) {
  const int64_t M = x2.size(0), K = x2.size(1);
  dispatch_float(x2.scalar_type(), [&](auto xtag) {
    using T = decltype(xtag);
    dispatch_float(weight.scalar_type(), [&](auto wtag) {
      using W = decltype(wtag);
      const T* xp = x2.const_data_ptr<T>();
      const T* rp = res2 ? res2->const_data_ptr<T>() : nullptr;
      T* hp = h_out ? h_out->data_ptr<T>() : nullptr;
      const W* wp = weight.const_data_ptr<W>();
      const int64_t xs = x2.stride(0), rs = res2 ? res2->stride(0) : 0;
      at::parallel_for(0, M, grain_rows(K), [&](int64_t begin, int64_t end) {
        for (int64_t m = begin; m < end; ++m) {
          norm_row<T, W>(xp + m * xs, rp ? rp + m * rs : nullptr, hp ? hp + m * K : nullptr, wp,
                         K, a, out, m);
        }
      });
    });
  });
}

struct NormCall {
  at::Tensor x2, res2, h_out;
  bool has_res = false;
  NormArgs args{};
};

NormCall prepare_norm(const char* op, const at::Tensor& x, const at::Tensor* residual,
                      const at::Tensor& weight, double eps, std::optional<at::ScalarType> nd,
                      bool weight_first) {
  check_input(op, "x", x);
  const int64_t K = x.size(-1);
  TORCH_CHECK(weight.device() == x.device(), op, ": weight is on ", weight.device(),
              " but x is on ", x.device());
  TORCH_CHECK(is_float(weight.scalar_type()), op,
              ": weight must be float32, bfloat16 or float16, got ", weight.scalar_type());
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == K, op, ": weight must have shape [", K,
              "] (the last dim of x), got ", weight.sizes());
  const at::ScalarType norm_dtype = nd.value_or(x.scalar_type());
  TORCH_CHECK(is_float(norm_dtype), op, ": norm_dtype must be float32, bfloat16 or float16, got ",
              norm_dtype);
  NormCall c;
  c.x2 = rows_of(x);
  if (residual != nullptr) {
    TORCH_CHECK(residual->sizes() == x.sizes() && residual->scalar_type() == x.scalar_type() &&
                    residual->device() == x.device(),
                op, ": residual must have x's shape, dtype and device; got ", residual->sizes(), " ",
                residual->scalar_type(), " for x ", x.sizes(), " ", x.scalar_type());
    c.res2 = rows_of(*residual);
    c.h_out = new_output(x.sizes(), x, x.scalar_type());
    c.has_res = true;
  }
  c.args = {static_cast<float>(eps), round_kind(norm_dtype),
            round_kind(at::promote_types(norm_dtype, weight.scalar_type())), weight_first};
  return c;
}

at::Tensor fp8_norm(const char* op, const at::Tensor& x, const at::Tensor* residual,
                    const at::Tensor& weight, double eps, const at::Tensor& scale,
                    std::optional<at::ScalarType> nd, bool weight_first, at::Tensor* h_out) {
  NormCall c = prepare_norm(op, x, residual, weight, eps, nd, weight_first);
  const float inv = 1.0f / read_scale(op, "scale", scale, x);
  at::Tensor q = new_output(x.sizes(), x, at::kFloat8_e4m3fn);
  const at::Tensor w = weight.contiguous();
  const quant::Fp8Rows out{reinterpret_cast<uint8_t*>(q.data_ptr()), x.size(-1), inv};
  at::Tensor h2 = c.has_res ? c.h_out.view({-1, x.size(-1)}) : at::Tensor();
  if (x.numel() > 0) {
    norm_rows(c.x2, c.has_res ? &c.res2 : nullptr, c.has_res ? &h2 : nullptr, w, c.args, out);
  }
  if (h_out != nullptr) *h_out = c.h_out;
  return q;
}

std::tuple<at::Tensor, at::Tensor> nvfp4_norm(const char* op, const at::Tensor& x,
                                              const at::Tensor* residual, const at::Tensor& weight,
                                              double eps, const at::Tensor& g_t,
                                              std::optional<at::ScalarType> nd, bool weight_first,
                                              bool swizzle, at::Tensor* h_out) {
  NormCall c = prepare_norm(op, x, residual, weight, eps, nd, weight_first);
  const float g = read_scale(op, "global_scale", g_t, x);
  const int64_t K = x.size(-1), M = x.numel() / K;
  Nvfp4Tensors t = nvfp4_outputs(op, x, M, K, g, swizzle);
  const at::Tensor w = weight.contiguous();
  at::Tensor h2 = c.has_res ? c.h_out.view({-1, K}) : at::Tensor();
  if (M > 0) {
    norm_rows(c.x2, c.has_res ? &c.res2 : nullptr, c.has_res ? &h2 : nullptr, w, c.args, t.out);
  }
  if (h_out != nullptr) *h_out = c.h_out;
  return {t.packed, t.scales.view(at::kFloat8_e4m3fn)};
}

at::Tensor rms_norm_quant_fp8(const at::Tensor& x, const at::Tensor& weight, double eps,
                              const at::Tensor& scale, std::optional<at::ScalarType> norm_dtype,
                              bool weight_first) {
  return fp8_norm("graphfuse::rms_norm_quant_fp8", x, nullptr, weight, eps, scale, norm_dtype,
                  weight_first, nullptr);
}

std::tuple<at::Tensor, at::Tensor> add_rms_norm_quant_fp8(
    const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight, double eps,
    const at::Tensor& scale, std::optional<at::ScalarType> norm_dtype, bool weight_first) {
  at::Tensor h;
  at::Tensor q = fp8_norm("graphfuse::add_rms_norm_quant_fp8", x, &residual, weight, eps, scale,
                          norm_dtype, weight_first, &h);
  return {q, h};
}

std::tuple<at::Tensor, at::Tensor> rms_norm_quant_nvfp4(const at::Tensor& x,
                                                        const at::Tensor& weight, double eps,
                                                        const at::Tensor& global_scale,
                                                        std::optional<at::ScalarType> norm_dtype,
                                                        bool weight_first, bool swizzle) {
  return nvfp4_norm("graphfuse::rms_norm_quant_nvfp4", x, nullptr, weight, eps, global_scale,
                    norm_dtype, weight_first, swizzle, nullptr);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> add_rms_norm_quant_nvfp4(
    const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight, double eps,
    const at::Tensor& global_scale, std::optional<at::ScalarType> norm_dtype, bool weight_first,
    bool swizzle) {
  at::Tensor h;
  auto [packed, scales] = nvfp4_norm("graphfuse::add_rms_norm_quant_nvfp4", x, &residual, weight,
                                     eps, global_scale, norm_dtype, weight_first, swizzle, &h);
  return {packed, scales, h};
}

// ---------------------------------------------------------------------------------------
// activation(gate) * up

// z[j] = round(round(act(gate[j])) * up[j]) for j < n, the activation computed with the exact
// exp (16 AVX-512 lanes where usable, else 8 AVX2 lanes, then scalar).
template <typename T>
void act_and_mul_exact(const T* gate, const T* up, int64_t n, bool gelu, float* z) {
  constexpr RoundTo to = std::is_same_v<T, c10::BFloat16> ? RoundTo::kBF16
                         : std::is_same_v<T, c10::Half>   ? RoundTo::kF16
                                                          : RoundTo::kF32;
  int64_t j = 0;
#ifdef GRAPHFUSE_AVX2
  if (normact::avx512_usable()) j = normact::avx512::act_and_mul(gate, up, n, gelu, to, z);
  for (; j + 8 <= n; j += 8) {
    const __m256 a = normact::round_to(normact::act_ref(simd::load8(gate + j), gelu), to);
    _mm256_storeu_ps(z + j, normact::round_to(_mm256_mul_ps(a, simd::load8(up + j)), to));
  }
#endif
  for (; j < n; ++j) {
    const float a = normact::round_to(normact::act_ref(static_cast<float>(gate[j]), gelu), to);
    z[j] = normact::round_to(a * static_cast<float>(up[j]), to);
  }
}

// For a bf16 or fp16 gate, round(act(gate)) to the gate's dtype is a function of the gate's 16
// bits. The table holds it, as an fp32 (which represents it exactly), for all 65536 patterns
// (NaN, inf and subnormal ones included), computed by act_and_mul_exact with up = 1 (a
// product that is exact), so a lookup gives the exact path's value. One table per
// (T, activation), built on first use.
constexpr int64_t kTableSize = 65536;

template <typename T>
std::unique_ptr<float[]> build_act_table(bool gelu) {
  constexpr RoundTo to = std::is_same_v<T, c10::BFloat16> ? RoundTo::kBF16 : RoundTo::kF16;
  auto table = std::make_unique<float[]>(kTableSize);
  T gate[kBlock], one[kBlock];
  std::fill(one, one + kBlock, T(1.0f));
  for (int64_t b0 = 0; b0 < kTableSize; b0 += kBlock) {
    for (int64_t j = 0; j < kBlock; ++j) gate[j] = T(static_cast<uint16_t>(b0 + j), T::from_bits());
    act_and_mul_exact(gate, one, kBlock, gelu, table.get() + b0);
    for (int64_t j = 0; j < kBlock; ++j) table[b0 + j] = normact::round_to(table[b0 + j], to);
  }
  return table;
}

template <typename T, bool Gelu>
const float* act_table() {
  static const std::unique_ptr<float[]> table = build_act_table<T>(Gelu);  // thread-safe init
  return table.get();
}

// z[j] = round(table[gate[j]] * up[j]) for j < n (gathers of 16 AVX-512 lanes where usable,
// else 8 AVX2 lanes, then scalar).
template <typename T>
void act_and_mul_table(const T* gate, const T* up, int64_t n, const float* table, float* z) {
  constexpr RoundTo to = std::is_same_v<T, c10::BFloat16> ? RoundTo::kBF16 : RoundTo::kF16;
  int64_t j = 0;
#ifdef GRAPHFUSE_AVX2
  if (normact::avx512_usable()) j = normact::avx512::table_and_mul(gate, up, n, table, to, z);
  for (; j + 8 <= n; j += 8) {
    const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(gate + j));
    const __m256 a = _mm256_i32gather_ps(table, _mm256_cvtepu16_epi32(bits), 4);
    _mm256_storeu_ps(z + j, normact::round_to(_mm256_mul_ps(a, simd::load8(up + j)), to));
  }
#endif
  for (; j < n; ++j) z[j] = normact::round_to(table[gate[j].x] * static_cast<float>(up[j]), to);
}

template <typename T, typename Out>
void act_row(const T* gate, const T* up, int64_t K, bool gelu, const float* table,
             const Out& out, int64_t m) {
  alignas(64) float z[kBlock];
  for (int64_t c0 = 0; c0 < K; c0 += kBlock) {
    const int64_t n = std::min(kBlock, K - c0);
    if constexpr (std::is_same_v<T, float>) {
      act_and_mul_exact(gate + c0, up + c0, n, gelu, z);
    } else {
      act_and_mul_table(gate + c0, up + c0, n, table, z);
    }
    out.put(m, c0, z, n);
  }
}

struct ActCall {
  at::Tensor g2, u2;
  bool gelu = false;
};

ActCall prepare_act(const char* op, const at::Tensor& gate, const at::Tensor& up,
                    c10::string_view activation) {
  check_input(op, "gate", gate);
  TORCH_CHECK(up.sizes() == gate.sizes() && up.scalar_type() == gate.scalar_type() &&
                  up.device() == gate.device(),
              op, ": up must have gate's shape, dtype and device; got ", up.sizes(), " ",
              up.scalar_type(), " for gate ", gate.sizes(), " ", gate.scalar_type());
  TORCH_CHECK(activation == "silu" || activation == "gelu_tanh", op,
              ": activation must be \"silu\" or \"gelu_tanh\", got \"", std::string(activation),
              "\"");
  return {rows_of(gate), rows_of(up), activation == "gelu_tanh"};
}

template <typename Out>
void act_rows(const ActCall& c, const Out& out) {
  const int64_t M = c.g2.size(0), K = c.g2.size(1);
  if (M == 0) return;
  dispatch_float(c.g2.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    const T* gp = c.g2.const_data_ptr<T>();
    const T* up = c.u2.const_data_ptr<T>();
    const int64_t gs = c.g2.stride(0), us = c.u2.stride(0);
    const float* table = nullptr;
    if constexpr (!std::is_same_v<T, float>) {
      table = c.gelu ? act_table<T, true>() : act_table<T, false>();
    }
    at::parallel_for(0, M, grain_rows(K), [&](int64_t begin, int64_t end) {
      for (int64_t m = begin; m < end; ++m) {
        act_row<T>(gp + m * gs, up + m * us, K, c.gelu, table, out, m);
      }
    });
  });
}

at::Tensor act_and_mul_quant_fp8(const at::Tensor& gate, const at::Tensor& up,
                                 const at::Tensor& scale, c10::string_view activation) {
  constexpr const char* op = "graphfuse::act_and_mul_quant_fp8";
  const ActCall c = prepare_act(op, gate, up, activation);
  const float inv = 1.0f / read_scale(op, "scale", scale, gate);
  at::Tensor q = new_output(gate.sizes(), gate, at::kFloat8_e4m3fn);
  act_rows(c, quant::Fp8Rows{reinterpret_cast<uint8_t*>(q.data_ptr()), gate.size(-1), inv});
  return q;
}

std::tuple<at::Tensor, at::Tensor> act_and_mul_quant_nvfp4(const at::Tensor& gate,
                                                           const at::Tensor& up,
                                                           const at::Tensor& global_scale,
                                                           c10::string_view activation,
                                                           bool swizzle) {
  constexpr const char* op = "graphfuse::act_and_mul_quant_nvfp4";
  const ActCall c = prepare_act(op, gate, up, activation);
  const float g = read_scale(op, "global_scale", global_scale, gate);
  const int64_t K = gate.size(-1);
  Nvfp4Tensors t = nvfp4_outputs(op, gate, gate.numel() / K, K, g, swizzle);
  act_rows(c, t.out);
  return {t.packed, t.scales.view(at::kFloat8_e4m3fn)};
}

}  // namespace

TORCH_LIBRARY_IMPL(graphfuse, CPU, m) {
  m.impl("rms_norm_quant_fp8", TORCH_FN(rms_norm_quant_fp8));
  m.impl("add_rms_norm_quant_fp8", TORCH_FN(add_rms_norm_quant_fp8));
  m.impl("rms_norm_quant_nvfp4", TORCH_FN(rms_norm_quant_nvfp4));
  m.impl("add_rms_norm_quant_nvfp4", TORCH_FN(add_rms_norm_quant_nvfp4));
  m.impl("act_and_mul_quant_fp8", TORCH_FN(act_and_mul_quant_fp8));
  m.impl("act_and_mul_quant_nvfp4", TORCH_FN(act_and_mul_quant_nvfp4));
}

}  // namespace graphfuse
