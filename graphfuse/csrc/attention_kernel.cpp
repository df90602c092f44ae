// attention_kernel.cpp: the flash-style CPU kernel behind graphfuse::attention{,_fp8,_nvfp4}.
//
// One task = (batch b, kv head, block of Br query positions) and all G = Hq / Hkv query heads
// of that kv head: R = G * Br rows share every K/V block, which is converted once into
// per-thread fp32 tiles (K transposed for the Q·Kᵀ micro-kernel). Online softmax in the log2
// domain with fp32 accumulation; causal blocks above the diagonal are skipped. The epilogue
// normalises each row and writes it straight into the output layout: 16/32-bit, FP8 e4m3
// (e4m3(O * v_scale * (1/s_o))) or NVFP4 (block of 16 amax, e4m3 block scale, e2m1 pack,
// swizzled scale offset), all via formats.h.
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "attention.h"
#include "attention_direct.h"
#include "formats.h"

namespace graphfuse {
namespace attn {
namespace {

using formats::round_up;

constexpr int64_t kBlockK = 64;  // keys per K/V block
constexpr int64_t kRows = 64;    // target rows (query heads x positions) per task
constexpr int kMR = 6;           // micro-kernel rows
constexpr float kLog2e = 1.4426950408889634f;

template <typename Fn>
void dispatch_rows(int64_t rows, Fn&& fn) {
  switch (rows) {
    case 1: fn(std::integral_constant<int, 1>()); break;
    case 2: fn(std::integral_constant<int, 2>()); break;
    case 3: fn(std::integral_constant<int, 3>()); break;
    case 4: fn(std::integral_constant<int, 4>()); break;
    case 5: fn(std::integral_constant<int, 5>()); break;
    default: fn(std::integral_constant<int, 6>()); break;
  }
}

struct Workspace {
  std::vector<float> q, kr, kt, v, s, o, m, l, alpha, row;
  Workspace(int64_t rows, int64_t dp)
      : q(rows * dp, 0.0f), kr(8 * dp, 0.0f), kt(dp * kBlockK, 0.0f),
        v(kBlockK * dp, 0.0f), s(rows * kBlockK, 0.0f), o(rows * dp, 0.0f), m(rows),
        l(rows), alpha(rows), row(dp) {}
};

// Normalises row o (O = (acc / l) * v_scale; l == 0, a row whose every key is masked, gives
// zeros) into vals and writes it at (b, h, i) in the output format.
void write_row(const Problem& p, int64_t b, int64_t h, int64_t i, const float* o, float l,
               float* vals) {
  const int64_t D = p.D;
  const int64_t base = p.out_index(b, h, i);
  for (int64_t d = 0; d < D; ++d) vals[d] = l > 0.0f ? (o[d] / l) * p.v_scale : 0.0f;
  switch (p.out) {
    case OutKind::F32:
      std::copy(vals, vals + D, static_cast<float*>(p.out_ptr) + base);
      break;
    case OutKind::BF16: {
      auto* dst = static_cast<c10::BFloat16*>(p.out_ptr) + base;
      for (int64_t d = 0; d < D; ++d) dst[d] = c10::BFloat16(vals[d]);
      break;
    }
    case OutKind::F16: {
      auto* dst = static_cast<c10::Half*>(p.out_ptr) + base;
      for (int64_t d = 0; d < D; ++d) dst[d] = c10::Half(vals[d]);
      break;
    }
    case OutKind::FP8:
      // e4m3(clamp(O * (1/s_o))): the encoder saturates to ±448, as the clamp does.
      simd::fp8_encode_span(vals, static_cast<uint8_t*>(p.out_ptr) + base, D, p.out_inv);
      break;
    case OutKind::NVFP4: {
      auto* packed = static_cast<uint8_t*>(p.out_ptr);
      for (int64_t d0 = 0; d0 < D; d0 += 16) {
        const int64_t e0 = base + d0;  // even: rows of the [M, K] view start at multiples of 16
        const uint8_t sf = simd::nvfp4_encode_block(vals + d0, packed + e0 / 2, p.g);
        const int64_t m = e0 / p.nvfp4_k, kcol = (e0 % p.nvfp4_k) / 16;
        p.scale_ptr[formats::swizzled_scale_offset(m, kcol, p.n_ktiles)] = sf;
      }
      break;
    }
  }
}

// Logits of row r (query i of head h) for keys [j0, j0 + n) -> probabilities, online softmax.
void softmax_row(const Problem& p, float* t, int64_t n, int64_t n8, int64_t b, int64_t h,
                 int64_t i, int64_t j0, float& m, float& l, float& alpha) {
  scale_row(t, n, p.qk_log2);
  for (int64_t j = n; j < n8; ++j) t[j] = -INFINITY;
  if (p.causal != Causal::None) {
    const int64_t lim = std::max<int64_t>(0, i + p.causal_off - j0 + 1);
    for (int64_t j = lim; j < n; ++j) t[j] = -INFINITY;
  }
  if (p.mask != nullptr) {
    const int64_t off = b * p.mb + h * p.mh + i * p.mi + j0 * p.mj;
    if (p.mask_bool) {
      const auto* mk = static_cast<const bool*>(p.mask) + off;
      for (int64_t j = 0; j < n; ++j)
        if (!mk[j * p.mj]) t[j] = -INFINITY;
    } else {
      for (int64_t j = 0; j < n; ++j)
        t[j] += load_one(p.mask, p.mask_kind, off + j * p.mj) * kLog2e;
    }
  }
  const float mx = max_row(t, n8);
  const float m_new = std::max(m, mx);
  if (m_new == -INFINITY) {  // nothing visible yet: p = 0, the (zero) accumulator stays
    std::fill(t, t + n8, 0.0f);
    alpha = 1.0f;
    return;
  }
  alpha = std::exp2(m - m_new);
  const float sum = exp2_row(t, n8, m_new);
  l = l * alpha + sum;
  m = m_new;
}

void run_task(const Problem& p, Workspace& ws, int64_t b, int64_t hk, int64_t i0, int64_t nq) {
  const int64_t G = p.Hq / p.Hkv, D = p.D, D8 = round_up(D, 8), Dp = round_up(D, 16);
  const int64_t R = G * nq;
  float* Q = ws.q.data();
  float* O = ws.o.data();
  float* S = ws.s.data();
  for (int64_t r = 0; r < R; ++r) {
    const int64_t h = hk * G + r / nq, i = i0 + r % nq;
    load_row(static_cast<const char*>(p.q.ptr) +
                 (b * p.q.sb + h * p.q.sh + i * p.q.ss) * elem_size(p.q.kind),
             p.q.kind, D, Q + r * Dp);
    std::fill(O + r * Dp, O + (r + 1) * Dp, 0.0f);
    ws.m[r] = -INFINITY;
    ws.l[r] = 0.0f;
  }
  int64_t kend = p.Skv;
  if (p.causal != Causal::None) kend = std::min(kend, i0 + nq - 1 + p.causal_off + 1);
  const auto* kbase = static_cast<const char*>(p.k.ptr) +
                      (b * p.k.sb + hk * p.k.sh) * elem_size(p.k.kind);
  const auto* vbase = static_cast<const char*>(p.v.ptr) +
                      (b * p.v.sb + hk * p.v.sh) * elem_size(p.v.kind);
  for (int64_t j0 = 0; j0 < kend; j0 += kBlockK) {
    const int64_t n = std::min(kBlockK, kend - j0), n8 = round_up(n, 8), n16 = round_up(n, 16);
    // Decode-sized tasks (at most 4 rows) take Q·Kᵀ straight from the K rows.
    const bool k_direct = R <= 4 && D % 16 == 0;
    const int64_t krow = p.k.ss * elem_size(p.k.kind);
    if (!k_direct) {
      load_k_transposed(kbase + j0 * krow, krow, p.k.kind, n, D, ws.kt.data(), kBlockK,
                        ws.kr.data());
    }
    // Decode-sized tasks (one row panel) convert V inside the P·V kernel; others fill a tile.
    const bool v_direct = R <= kMR && D % 16 == 0;
    if (!v_direct) {
      with_kind(p.v.kind, [&](auto kind) {
        for (int64_t j = 0; j < n; ++j)
          load_row_t<decltype(kind)::value>(vbase + (j0 + j) * p.v.ss * elem_size(p.v.kind),
                                            D, ws.v.data() + j * Dp);
      });
    }
    if (k_direct) {
      dispatch_rows(R, [&](auto mr) {
        constexpr int kR = decltype(mr)::value < 4 ? decltype(mr)::value : 4;
        with_kind(p.k.kind, [&](auto kind) {
          qk_rows<kR>(Q, Dp, SrcRows<decltype(kind)::value>{kbase + j0 * krow, krow}, D, n, S,
                      kBlockK);
        });
      });
    } else {
      for (int64_t r0 = 0; r0 < R; r0 += kMR) {
        dispatch_rows(std::min<int64_t>(kMR, R - r0), [&](auto mr) {
          for (int64_t c0 = 0; c0 < n16; c0 += 16)
            gemm_micro<decltype(mr)::value>(Q + r0 * Dp, Dp, F32Rows{ws.kt.data(), kBlockK}, c0,
                                            D8, nullptr, S + r0 * kBlockK + c0, kBlockK);
        });
      }
    }
    for (int64_t r = 0; r < R; ++r) {
      softmax_row(p, S + r * kBlockK, n, n8, b, hk * G + r / nq, i0 + r % nq, j0, ws.m[r],
                  ws.l[r], ws.alpha[r]);
    }
    if (v_direct) {
      const int64_t vrow = p.v.ss * elem_size(p.v.kind);
      const char* vblk = vbase + j0 * vrow;
      dispatch_rows(R, [&](auto mr) {
        with_kind(p.v.kind, [&](auto kind) {
          for (int64_t d0 = 0; d0 < D; d0 += 16)
            gemm_micro<decltype(mr)::value>(S, kBlockK, SrcRows<decltype(kind)::value>{vblk, vrow},
                                            d0, n, ws.alpha.data(), O + d0, Dp);
        });
      });
    } else {
      for (int64_t r0 = 0; r0 < R; r0 += kMR) {
        dispatch_rows(std::min<int64_t>(kMR, R - r0), [&](auto mr) {
          for (int64_t d0 = 0; d0 < Dp; d0 += 16)
            gemm_micro<decltype(mr)::value>(S + r0 * kBlockK, kBlockK, F32Rows{ws.v.data(), Dp},
                                            d0, n, ws.alpha.data() + r0, O + r0 * Dp + d0, Dp);
        });
      }
    }
  }
  for (int64_t r = 0; r < R; ++r)
    write_row(p, b, hk * G + r / nq, i0 + r % nq, O + r * Dp, ws.l[r], ws.row.data());
}

}  // namespace

void run_attention(const Problem& p) {
  const int64_t G = p.Hq / p.Hkv;
  const int64_t br = std::min<int64_t>(p.Sq, std::max<int64_t>(1, kRows / G));
  const int64_t nqb = (p.Sq + br - 1) / br;
  const int64_t total = p.B * p.Hkv * nqb;
  if (total == 0) return;
  const int64_t dp = round_up(p.D, 16);
  at::parallel_for(0, total, 1, [&](int64_t begin, int64_t end) {
    Workspace ws(G * br, dp);
    for (int64_t t = begin; t < end; ++t) {
      // Query blocks interleaved from both ends so contiguous chunks balance causal work.
      const int64_t x = t % nqb;
      const int64_t qb = (x % 2 == 0) ? x / 2 : nqb - 1 - x / 2;
      const int64_t bh = t / nqb;
      const int64_t i0 = qb * br;
      run_task(p, ws, bh / p.Hkv, bh % p.Hkv, i0, std::min(br, p.Sq - i0));
    }
  });
}

}  // namespace attn
}  // namespace graphfuse
