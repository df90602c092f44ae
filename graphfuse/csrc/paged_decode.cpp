// paged_decode.cpp: C++ CPU kernels of graphfuse::paged_decode_attention{,_fp8,_nvfp4}.
//
// One query token per sequence: q [B, Hq, D]; kv_cache [num_blocks, 2, block_size, Hkv, D]
// (16/32-bit, or float8_e4m3fn with k_scale / v_scale); block_tables int32 [B, max_blocks];
// seq_lens int32 [B]. Work item = (sequence b, KV head): its G = Hq/Hkv query heads walk the
// sequence's tokens through the block table once (online softmax in fp32, tokens in chunks),
// so every KV byte is read once; no dequantised tensor is materialised. The output is written
// as 16/32-bit, FP8 (dequant scale s_o) or NVFP4 over the [B, Hq*D] view (swizzled scales).
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "formats.h"
#include "quant_simd.h"

namespace {

namespace fm = graphfuse::formats;
constexpr int64_t kChunk = 64;

enum class OutKind { kWide, kFp8, kNvfp4 };

using graphfuse::simd::to_float;

float read_scale(const c10::optional<at::Tensor>& s) {
  return s.has_value() ? s->to(at::kFloat).reshape({}).item<float>() : 1.0f;
}

void check_args(const char* op, const at::Tensor& q, const at::Tensor& kv,
                const at::Tensor& bt, const at::Tensor& lens,
                const c10::optional<at::Tensor>& qs, const c10::optional<at::Tensor>& ks,
                const c10::optional<at::Tensor>& vs) {
  TORCH_CHECK(q.dim() == 3, op, ": q must be 3-D [B, Hq, D], got ", q.sizes());
  TORCH_CHECK(kv.dim() == 5 && kv.size(1) == 2, op,
              ": kv_cache must be [num_blocks, 2, block_size, Hkv, D], got ", kv.sizes());
  TORCH_CHECK(kv.size(4) == q.size(2), op, ": kv_cache head_dim ", kv.size(4),
              " != q head_dim ", q.size(2));
  TORCH_CHECK(kv.size(3) > 0 && q.size(1) % kv.size(3) == 0, op, ": Hq=", q.size(1),
              " must be a multiple of Hkv=", kv.size(3));
  TORCH_CHECK(bt.scalar_type() == at::kInt && bt.dim() == 2 && bt.size(0) == q.size(0), op,
              ": block_tables must be int32 [B=", q.size(0), ", max_blocks], got ",
              bt.scalar_type(), " ", bt.sizes());
  TORCH_CHECK(lens.scalar_type() == at::kInt && lens.dim() == 1 && lens.size(0) == q.size(0),
              op, ": seq_lens must be int32 [B=", q.size(0), "], got ", lens.scalar_type(), " ",
              lens.sizes());
  const bool q8 = q.scalar_type() == at::kFloat8_e4m3fn;
  const bool kv8 = kv.scalar_type() == at::kFloat8_e4m3fn;
  TORCH_CHECK(!q8 || qs.has_value(), op, ": q is float8_e4m3fn but q_scale is None");
  TORCH_CHECK(!kv8 || (ks.has_value() && vs.has_value()), op,
              ": kv_cache is float8_e4m3fn but k_scale or v_scale is None");
  for (const auto* s : {&qs, &ks, &vs}) {
    TORCH_CHECK(!s->has_value() || (*s)->numel() == 1, op,
                ": scales must have one element, got shape ", (*s)->sizes());
  }
}

struct Out {
  OutKind kind;
  void* data;         // wide / fp8 [B, Hq, D] contiguous, or packed [B, Hq*D/2]
  uint8_t* sf;        // NVFP4 swizzled scales
  at::ScalarType dt;  // wide dtype
  float oscale;       // 1/s_o (FP8) or g (NVFP4)
  int64_t n_ktiles;
};

// Writes the normalised output row o[D] of (b, head) in the requested format.
void write_row(const Out& out, const float* o, int64_t b, int64_t head, int64_t hq, int64_t d) {
  const int64_t base = (b * hq + head) * d;
  if (out.kind == OutKind::kWide) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out.dt, "paged_write", [&] {
      auto* p = static_cast<scalar_t*>(out.data) + base;
      for (int64_t i = 0; i < d; ++i) p[i] = static_cast<scalar_t>(o[i]);
    });
  } else if (out.kind == OutKind::kFp8) {
    auto* p = static_cast<uint8_t*>(out.data) + base;
    for (int64_t i = 0; i < d; ++i) {
      const float v = o[i] * out.oscale;
      p[i] = fm::float_to_e4m3(v != v ? v : std::min(std::max(v, -448.0f), 448.0f));
    }
  } else {
    auto* p = static_cast<uint8_t*>(out.data) + base / 2;
    const int64_t col0 = head * d;
    for (int64_t blk = 0; blk < d / 16; ++blk) {
      uint32_t amax_bits = 0;
      for (int64_t i = 0; i < 16; ++i) amax_bits = std::max(amax_bits, fm::abs_bits(o[blk * 16 + i]));
      const auto bs = fm::nvfp4_block_scale(fm::bits_to_float(amax_bits), out.oscale);
      for (int64_t i = 0; i < 16; i += 2) {
        const uint8_t lo = fm::nvfp4_encode(o[blk * 16 + i], bs.inv);
        const uint8_t hi = fm::nvfp4_encode(o[blk * 16 + i + 1], bs.inv);
        p[(blk * 16 + i) / 2] = static_cast<uint8_t>(lo | (hi << 4));
      }
      out.sf[fm::swizzled_scale_offset(b, col0 / 16 + blk, out.n_ktiles)] = bs.sf;
    }
  }
}

template <typename TQ, typename TKV>
void run(const at::Tensor& q, const at::Tensor& kv, const at::Tensor& bt,
         const at::Tensor& lens, float qk_mul, float vmul, const Out& out) {
  const int64_t B = q.size(0), hq = q.size(1), d = q.size(2);
  const int64_t bs = kv.size(2), hkv = kv.size(3), mb = bt.size(1), nblocks = kv.size(0);
  const int64_t g = hq / hkv;
  const TQ* qp = q.data_ptr<TQ>();
  const TKV* kvp = kv.data_ptr<TKV>();
  const int32_t* btp = bt.data_ptr<int32_t>();
  const int32_t* lp = lens.data_ptr<int32_t>();
  const int64_t s_blk = kv.stride(0), s_kv = kv.stride(1), s_tok = kv.stride(2);
  for (int64_t b = 0; b < B; ++b) {
    TORCH_CHECK(lp[b] >= 0 && lp[b] <= mb * bs, "graphfuse::paged_decode_attention: seq_lens[",
                b, "] = ", lp[b], " is outside [0, max_blocks * block_size = ", mb * bs, "]");
    for (int64_t j = 0; j < (lp[b] + bs - 1) / bs; ++j) {
      const int32_t blk = btp[b * mb + j];
      TORCH_CHECK(blk >= 0 && blk < nblocks, "graphfuse::paged_decode_attention: block_tables[",
                  b, ", ", j, "] = ", blk, " is outside [0, num_blocks = ", nblocks, ")");
    }
  }
  at::parallel_for(0, B * hkv, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> qf(g * d), acc(g * d), kf(d), vf(d), s(g * kChunk), m(g), l(g), o(d);
    for (int64_t w = begin; w < end; ++w) {
      const int64_t b = w / hkv, h = w % hkv;
      for (int64_t gi = 0; gi < g; ++gi) {
        const TQ* row = qp + (b * hq + h * g + gi) * d;
        for (int64_t i = 0; i < d; ++i) qf[gi * d + i] = to_float(row[i]) * qk_mul;
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      std::fill(m.begin(), m.end(), -std::numeric_limits<float>::infinity());
      std::fill(l.begin(), l.end(), 0.0f);
      const int64_t len = lp[b];
      for (int64_t t0 = 0; t0 < len; t0 += kChunk) {
        const int64_t n = std::min(kChunk, len - t0);
        for (int64_t t = 0; t < n; ++t) {
          const int64_t tok = t0 + t;
          const TKV* kr = kvp + btp[b * mb + tok / bs] * s_blk + (tok % bs) * s_tok + h * d;
          for (int64_t i = 0; i < d; ++i) kf[i] = to_float(kr[i]);
          for (int64_t gi = 0; gi < g; ++gi) {
            float dot = 0.0f;
            const float* qr = qf.data() + gi * d;
            for (int64_t i = 0; i < d; ++i) dot += qr[i] * kf[i];
            s[gi * kChunk + t] = dot;
          }
        }
        for (int64_t gi = 0; gi < g; ++gi) {
          float* sr = s.data() + gi * kChunk;
          float mx = m[gi];
          for (int64_t t = 0; t < n; ++t) mx = std::max(mx, sr[t]);
          const float alpha = std::exp(m[gi] - mx);  // m = -inf first: exp(-inf) = 0
          float sum = 0.0f;
          for (int64_t t = 0; t < n; ++t) {
            sr[t] = std::exp(sr[t] - mx);
            sum += sr[t];
          }
          l[gi] = l[gi] * alpha + sum;
          m[gi] = mx;
          float* ar = acc.data() + gi * d;
          for (int64_t i = 0; i < d; ++i) ar[i] *= alpha;
        }
        for (int64_t t = 0; t < n; ++t) {
          const int64_t tok = t0 + t;
          const TKV* vr =
              kvp + btp[b * mb + tok / bs] * s_blk + s_kv + (tok % bs) * s_tok + h * d;
          for (int64_t i = 0; i < d; ++i) vf[i] = to_float(vr[i]);
          for (int64_t gi = 0; gi < g; ++gi) {
            const float p = s[gi * kChunk + t];
            float* ar = acc.data() + gi * d;
            for (int64_t i = 0; i < d; ++i) ar[i] += p * vf[i];
          }
        }
      }
      for (int64_t gi = 0; gi < g; ++gi) {
        const float inv = l[gi] > 0.0f ? vmul / l[gi] : 0.0f;
        for (int64_t i = 0; i < d; ++i) o[i] = acc[gi * d + i] * inv;
        write_row(out, o.data(), b, h * g + gi, hq, d);
      }
    }
  });
}

template <typename TQ>
void dispatch_kv(const at::Tensor& q, const at::Tensor& kv, const at::Tensor& bt,
                 const at::Tensor& lens, float qk_mul, float vmul, const Out& out) {
  switch (kv.scalar_type()) {
    case at::kFloat: return run<TQ, float>(q, kv, bt, lens, qk_mul, vmul, out);
    case at::kHalf: return run<TQ, at::Half>(q, kv, bt, lens, qk_mul, vmul, out);
    case at::kBFloat16: return run<TQ, at::BFloat16>(q, kv, bt, lens, qk_mul, vmul, out);
    case at::kFloat8_e4m3fn:
      return run<TQ, c10::Float8_e4m3fn>(q, kv, bt, lens, qk_mul, vmul, out);
    default:
      TORCH_CHECK(false, "graphfuse::paged_decode_attention: unsupported kv_cache dtype ",
                  kv.scalar_type());
  }
}

void launch(const char* op, const at::Tensor& q_in, const at::Tensor& kv_in,
            const at::Tensor& bt_in, const at::Tensor& lens_in,
            const c10::optional<at::Tensor>& qs, const c10::optional<at::Tensor>& ks,
            const c10::optional<at::Tensor>& vs, c10::optional<double> scale, const Out& out) {
  const at::Tensor q = q_in.contiguous(), kv = kv_in.contiguous();
  const at::Tensor bt = bt_in.contiguous(), lens = lens_in.contiguous();
  const int64_t d = q.size(2);
  const float sm = scale.has_value() ? static_cast<float>(*scale) : 1.0f / std::sqrt(float(d));
  const float qk_mul = sm * read_scale(qs) * read_scale(ks);
  const float vmul = read_scale(vs);
  switch (q.scalar_type()) {
    case at::kFloat: return dispatch_kv<float>(q, kv, bt, lens, qk_mul, vmul, out);
    case at::kHalf: return dispatch_kv<at::Half>(q, kv, bt, lens, qk_mul, vmul, out);
    case at::kBFloat16: return dispatch_kv<at::BFloat16>(q, kv, bt, lens, qk_mul, vmul, out);
    case at::kFloat8_e4m3fn:
      return dispatch_kv<c10::Float8_e4m3fn>(q, kv, bt, lens, qk_mul, vmul, out);
    default:
      TORCH_CHECK(false, op, ": unsupported q dtype ", q.scalar_type());
  }
}

at::Tensor paged_decode_attention(const at::Tensor& q, const at::Tensor& kv,
                                  const at::Tensor& bt, const at::Tensor& lens,
                                  const c10::optional<at::Tensor>& qs,
                                  const c10::optional<at::Tensor>& ks,
                                  const c10::optional<at::Tensor>& vs,
                                  c10::optional<double> scale, at::ScalarType out_dtype) {
  const char* op = "graphfuse::paged_decode_attention";
  check_args(op, q, kv, bt, lens, qs, ks, vs);
  TORCH_CHECK(out_dtype == at::kFloat || out_dtype == at::kHalf || out_dtype == at::kBFloat16,
              op, ": unsupported out_dtype ", out_dtype, " (float32, bfloat16, float16)");
  at::Tensor out = at::empty(q.sizes(), q.options().dtype(out_dtype));
  launch(op, q, kv, bt, lens, qs, ks, vs, scale,
         Out{OutKind::kWide, out.data_ptr(), nullptr, out_dtype, 1.0f, 0});
  return out;
}

at::Tensor paged_decode_attention_fp8(const at::Tensor& q, const at::Tensor& kv,
                                      const at::Tensor& bt, const at::Tensor& lens,
                                      const c10::optional<at::Tensor>& qs,
                                      const c10::optional<at::Tensor>& ks,
                                      const c10::optional<at::Tensor>& vs,
                                      c10::optional<double> scale, const at::Tensor& out_scale) {
  const char* op = "graphfuse::paged_decode_attention_fp8";
  check_args(op, q, kv, bt, lens, qs, ks, vs);
  TORCH_CHECK(out_scale.numel() == 1, op, ": out_scale must have one element, got shape ",
              out_scale.sizes());
  at::Tensor out = at::empty(q.sizes(), q.options().dtype(at::kFloat8_e4m3fn));
  const float inv = 1.0f / out_scale.to(at::kFloat).reshape({}).item<float>();
  launch(op, q, kv, bt, lens, qs, ks, vs, scale,
         Out{OutKind::kFp8, out.data_ptr(), nullptr, at::kFloat, inv, 0});
  return out;
}

std::tuple<at::Tensor, at::Tensor> paged_decode_attention_nvfp4(
    const at::Tensor& q, const at::Tensor& kv, const at::Tensor& bt, const at::Tensor& lens,
    const c10::optional<at::Tensor>& qs, const c10::optional<at::Tensor>& ks,
    const c10::optional<at::Tensor>& vs, c10::optional<double> scale,
    const at::Tensor& out_global_scale) {
  const char* op = "graphfuse::paged_decode_attention_nvfp4";
  check_args(op, q, kv, bt, lens, qs, ks, vs);
  TORCH_CHECK(out_global_scale.numel() == 1, op,
              ": out_global_scale must have one element, got shape ", out_global_scale.sizes());
  TORCH_CHECK(q.size(2) % 16 == 0, op, ": NVFP4 output needs head_dim D % 16 == 0, got D=",
              q.size(2));
  const int64_t b = q.size(0), k = q.size(1) * q.size(2);
  at::Tensor packed = at::empty({b, k / 2}, q.options().dtype(at::kByte));
  at::Tensor sf = at::zeros({fm::swizzled_scale_rows(b), fm::swizzled_scale_cols(k / 16)},
                            q.options().dtype(at::kByte));
  const float g = out_global_scale.to(at::kFloat).reshape({}).item<float>();
  launch(op, q, kv, bt, lens, qs, ks, vs, scale,
         Out{OutKind::kNvfp4, packed.data_ptr(), sf.data_ptr<uint8_t>(), at::kFloat, g,
             fm::swizzled_scale_cols(k / 16) / 4});
  return {packed, sf.view(at::kFloat8_e4m3fn)};
}

}  // namespace

TORCH_LIBRARY_IMPL(graphfuse, CPU, m) {
  m.impl("paged_decode_attention", &paged_decode_attention);
  m.impl("paged_decode_attention_fp8", &paged_decode_attention_fp8);
  m.impl("paged_decode_attention_nvfp4", &paged_decode_attention_nvfp4);
}
