// attention.cpp: CPU entry points of graphfuse::attention, attention_fp8 and attention_nvfp4
// (schemas in graphfuse/ops/_library.py): argument checks, scale folding, output allocation in
// the requested layout, then the fused kernel of attention_kernel.cpp.
//
// A scale given with a non-FP8 input multiplies it (it is a dequant scale whatever the dtype).
// precision "fast" is accepted and computed exactly like "default" (the CPU kernel keeps fp32
// probabilities). Set GRAPHFUSE_POISON_OUTPUTS=1 to fill every output with 0xFF bytes before
// the kernel runs (tests use it to prove that every element is written).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "attention.h"
#include "formats.h"

namespace graphfuse {
namespace attn {
namespace {

struct Prepared {
  Problem p;
  std::vector<int64_t> out_shape;
  at::Tensor q, k, v, mask;  // keep any contiguous / converted copies alive
};

InKind kind_of(const char* op, const char* name, const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return InKind::F32;
    case at::kBFloat16: return InKind::BF16;
    case at::kHalf: return InKind::F16;
    case at::kFloat8_e4m3fn: return InKind::E4M3;
    default:
      TORCH_CHECK(false, op, ": unsupported ", name, " dtype ", t.scalar_type(),
                  " (float32, bfloat16, float16, float8_e4m3fn)");
  }
}

float read_scale(const char* op, const char* name, const at::Tensor& s) {
  TORCH_CHECK(s.numel() == 1 && s.dim() <= 2, op, ": ", name,
              " must hold exactly one element (shape [], [1] or [1, 1]), got shape ", s.sizes());
  TORCH_CHECK(at::isFloatingType(s.scalar_type()), op, ": ", name,
              " must be a floating tensor, got ", s.scalar_type());
  const float v = s.to(at::kCPU).to(at::kFloat).item<float>();
  TORCH_CHECK(std::isfinite(v) && v > 0.0f, op, ": ", name, " must be finite and > 0, got ", v);
  return v;
}

Operand operand(const char* op, const char* name, at::Tensor& t) {
  if (t.stride(3) != 1) t = t.contiguous();
  Operand o;
  o.ptr = t.data_ptr();
  o.kind = kind_of(op, name, t);
  o.sb = t.stride(0);
  o.sh = t.stride(1);
  o.ss = t.stride(2);
  return o;
}

bool poison_outputs() {
  const char* env = std::getenv("GRAPHFUSE_POISON_OUTPUTS");
  return env != nullptr && std::strcmp(env, "1") == 0;
}

Prepared prepare(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                 const std::optional<at::Tensor>& q_scale,
                 const std::optional<at::Tensor>& k_scale,
                 const std::optional<at::Tensor>& v_scale,
                 const std::optional<at::Tensor>& attn_mask, c10::string_view causal,
                 std::optional<double> scale, c10::string_view layout,
                 c10::string_view precision) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op,
              ": q, k, v must be 4-D [B, H, S, D], got shapes ", q.sizes(), ", ", k.sizes(),
              ", ", v.sizes());
  TORCH_CHECK(q.device() == k.device() && q.device() == v.device() &&
                  (!attn_mask || attn_mask->device() == q.device()),
              op, ": q, k, v and attn_mask must be on one device, got q on ", q.device(),
              ", k on ", k.device(), ", v on ", v.device());
  TORCH_CHECK(q.device().is_cpu(), op, ": the CPU kernel got tensors on ", q.device());
  Prepared r;
  Problem& p = r.p;
  r.q = q;
  r.k = k;
  r.v = v;
  p.q = operand(op, "q", r.q);
  p.k = operand(op, "k", r.k);
  p.v = operand(op, "v", r.v);
  const std::pair<const at::Tensor*, const std::optional<at::Tensor>*> pairs[] = {
      {&q, &q_scale}, {&k, &k_scale}, {&v, &v_scale}};
  const char* names[] = {"q", "k", "v"};
  const char* scale_names[] = {"q_scale", "k_scale", "v_scale"};
  float sc[3] = {1.0f, 1.0f, 1.0f};
  for (int i = 0; i < 3; ++i) {
    const bool fp8 = pairs[i].first->scalar_type() == at::kFloat8_e4m3fn;
    TORCH_CHECK(!fp8 || pairs[i].second->has_value(), op, ": ", names[i],
                " is float8_e4m3fn but ", scale_names[i], " is None");
    if (pairs[i].second->has_value()) sc[i] = read_scale(op, scale_names[i], **pairs[i].second);
  }
  TORCH_CHECK(k.sizes() == v.sizes(), op, ": k and v must have the same shape, got ",
              k.sizes(), " and ", v.sizes());
  p.B = q.size(0);
  p.Hq = q.size(1);
  p.Sq = q.size(2);
  p.D = q.size(3);
  p.Hkv = k.size(1);
  p.Skv = k.size(2);
  TORCH_CHECK(k.size(0) == p.B && k.size(3) == p.D, op, ": k/v shape ", k.sizes(),
              " does not match q shape ", q.sizes(), " (batch and head_dim must agree)");
  TORCH_CHECK(p.Hkv > 0 && p.Hq % p.Hkv == 0, op, ": Hq=", p.Hq,
              " must be a multiple of Hkv=", p.Hkv);
  const double sm = scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(p.D));
  p.qk_log2 = sc[0] * sc[1] * static_cast<float>(sm) * 1.4426950408889634f;
  p.v_scale = sc[2];

  if (causal == "none") {
    p.causal = Causal::None;
  } else if (causal == "top_left") {
    p.causal = Causal::TopLeft;
  } else if (causal == "bottom_right") {
    p.causal = Causal::BottomRight;
    p.causal_off = p.Skv - p.Sq;
  } else {
    TORCH_CHECK(false, op, ": unknown causal '", std::string(causal),
                "' (one of none, top_left, bottom_right)");
  }
  TORCH_CHECK(precision == "default" || precision == "fast", op, ": unknown precision '",
              std::string(precision), "' (one of default, fast)");

  if (layout == "bhsd") {
    r.out_shape = {p.B, p.Hq, p.Sq, p.D};
  } else if (layout == "bshd") {
    r.out_shape = {p.B, p.Sq, p.Hq, p.D};
  } else if (layout == "bs(hd)") {
    r.out_shape = {p.B, p.Sq, p.Hq * p.D};
  } else if (layout == "(bs)(hd)") {
    r.out_shape = {p.B * p.Sq, p.Hq * p.D};
  } else {
    TORCH_CHECK(false, op, ": unknown layout '", std::string(layout),
                "' (one of bhsd, bshd, bs(hd), (bs)(hd))");
  }
  p.out_bhsd = layout == "bhsd";

  if (attn_mask.has_value()) {
    at::Tensor m = *attn_mask;
    const auto st = m.scalar_type();
    TORCH_CHECK(st == at::kBool || (at::isFloatingType(st) && st != at::kFloat8_e4m3fn), op,
                ": attn_mask must be bool or floating, got ", st);
    const std::vector<int64_t> target = {p.B, p.Hq, p.Sq, p.Skv};
    bool ok = m.dim() <= 4;
    for (int64_t d = 0; ok && d < m.dim(); ++d) {
      const int64_t ms = m.size(m.dim() - 1 - d), ts = target[3 - d];
      ok = ms == 1 || ms == ts;
    }
    TORCH_CHECK(ok, op, ": attn_mask of shape ", m.sizes(),
                " is not broadcastable to [B, Hq, Sq, Skv] = ", at::IntArrayRef(target));
    if (st != at::kBool && st != at::kFloat && st != at::kBFloat16 && st != at::kHalf)
      m = m.to(at::kFloat);
    r.mask = m.expand(target);
    p.mask = r.mask.data_ptr();
    p.mask_bool = st == at::kBool;
    if (!p.mask_bool) p.mask_kind = kind_of(op, "attn_mask", r.mask);
    p.mb = r.mask.stride(0);
    p.mh = r.mask.stride(1);
    p.mi = r.mask.stride(2);
    p.mj = r.mask.stride(3);
  }
  return r;
}

void maybe_poison(const at::Tensor& t) {
  if (poison_outputs() && t.numel() > 0) std::memset(t.data_ptr(), 0xFF, t.nbytes());
}

#define GRAPHFUSE_ATTN_ARGS                                                                \
  const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,                          \
      const std::optional<at::Tensor>&q_scale, const std::optional<at::Tensor>&k_scale,   \
      const std::optional<at::Tensor>&v_scale, const std::optional<at::Tensor>&attn_mask, \
      c10::string_view causal, std::optional<double> scale, c10::string_view layout,      \
      c10::string_view precision
#define GRAPHFUSE_ATTN_PASS \
  q, k, v, q_scale, k_scale, v_scale, attn_mask, causal, scale, layout, precision

at::Tensor attention_cpu(GRAPHFUSE_ATTN_ARGS, at::ScalarType out_dtype) {
  const char* op = "graphfuse::attention";
  Prepared r = prepare(op, GRAPHFUSE_ATTN_PASS);
  switch (out_dtype) {
    case at::kFloat: r.p.out = OutKind::F32; break;
    case at::kBFloat16: r.p.out = OutKind::BF16; break;
    case at::kHalf: r.p.out = OutKind::F16; break;
    default:
      TORCH_CHECK(false, op, ": unsupported out_dtype ", out_dtype,
                  " (float32, bfloat16, float16; use attention_fp8 / attention_nvfp4)");
  }
  at::Tensor out = at::empty(r.out_shape, q.options().dtype(out_dtype));
  maybe_poison(out);
  r.p.out_ptr = out.data_ptr();
  run_attention(r.p);
  return out;
}

at::Tensor attention_fp8_cpu(GRAPHFUSE_ATTN_ARGS, const at::Tensor& out_scale) {
  const char* op = "graphfuse::attention_fp8";
  Prepared r = prepare(op, GRAPHFUSE_ATTN_PASS);
  r.p.out = OutKind::FP8;
  r.p.out_inv = 1.0f / read_scale(op, "out_scale", out_scale);
  at::Tensor out = at::empty(r.out_shape, q.options().dtype(at::kFloat8_e4m3fn));
  maybe_poison(out);
  r.p.out_ptr = out.data_ptr();
  run_attention(r.p);
  return out;
}

std::tuple<at::Tensor, at::Tensor> attention_nvfp4_cpu(GRAPHFUSE_ATTN_ARGS,
                                                       const at::Tensor& out_global_scale) {
  const char* op = "graphfuse::attention_nvfp4";
  Prepared r = prepare(op, GRAPHFUSE_ATTN_PASS);
  Problem& p = r.p;
  TORCH_CHECK(p.D % 16 == 0, op, ": NVFP4 output needs head_dim D % 16 == 0, got D=", p.D);
  p.out = OutKind::NVFP4;
  p.g = read_scale(op, "out_global_scale", out_global_scale);
  const int64_t kdim = r.out_shape.back();
  int64_t mdim = 1;
  for (size_t i = 0; i + 1 < r.out_shape.size(); ++i) mdim *= r.out_shape[i];
  const int64_t kblocks = kdim / 16;
  const int64_t srows = formats::swizzled_scale_rows(mdim);
  const int64_t scols = formats::swizzled_scale_cols(kblocks);
  at::Tensor packed = at::empty({mdim, kdim / 2}, q.options().dtype(at::kByte));
  at::Tensor scales = at::empty({srows, scols}, q.options().dtype(at::kFloat8_e4m3fn));
  maybe_poison(packed);
  maybe_poison(scales);
  p.nvfp4_k = kdim;
  p.n_ktiles = scols / 4;
  p.out_ptr = packed.data_ptr();
  p.scale_ptr = static_cast<uint8_t*>(scales.data_ptr());
  // Padding bytes of the swizzled layout are zero.
  for (int64_t m = 0; m < srows; ++m) {
    for (int64_t kc = (m < mdim ? kblocks : 0); kc < scols; ++kc)
      p.scale_ptr[formats::swizzled_scale_offset(m, kc, p.n_ktiles)] = 0;
  }
  run_attention(p);
  return {packed, scales};
}

}  // namespace
}  // namespace attn
}  // namespace graphfuse

TORCH_LIBRARY_IMPL(graphfuse, CPU, m) {
  m.impl("attention", &graphfuse::attn::attention_cpu);
  m.impl("attention_fp8", &graphfuse::attn::attention_fp8_cpu);
  m.impl("attention_nvfp4", &graphfuse::attn::attention_nvfp4_cpu);
}
