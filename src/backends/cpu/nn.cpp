// The CPU kernels of the nn family: softmax / log_softmax, cross entropy,
// layer norm, embedding and dropout, each one fused forward kernel and one
// fused backward kernel (contracts: the nn section of
// src/backends/kernel_table.h; host side: src/backends/nn.cpp). Each kernel
// table entry turns the shared argument struct into the typed view its loops
// take (Typed*Args: the same fields, with typed pointers).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "src/backends/cpu/dispatch.h"
#include "src/backends/cpu/parallel.h"
#include "src/backends/cpu/simd.h"
#include "src/backends/kernel_table.h"
#include "src/backends/nn_formulas.h"
#include "src/core/kernel_errors.h"

namespace encore::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Columns handled together when reducing over a dim that is not the last
// (inner > 1): per-column running values live in stack arrays of this size,
// and each step of the reduction reads kLanes adjacent elements.
constexpr int64_t kLanes = 64;
// layer_norm backward sums dweight/dbias over at most this many fixed row
// blocks (partials in a scratch buffer), then combines them in block order
// (NnKernels::layer_norm_max_chunks: the host cuts the rows).
constexpr int64_t kMaxRowBlocks = 64;

// Units per parallel chunk so that a chunk holds about `grain` elements of work.
int64_t grain_for(int64_t work_per_unit, int64_t grain) {
  return std::max<int64_t>(1, grain / std::max<int64_t>(1, work_per_unit));
}

template <typename T>
ENCORE_SIMD_INLINE float ld(T v) { return static_cast<float>(v); }

// Sum / max of f(k) over k in [0, n) in kAcc independent accumulators: one
// float accumulator is a serial chain that GCC keeps in order (no -ffast-math),
// kAcc of them vectorize. The order: lane j takes k = j, j + 8, ... up to the
// last full group of 8; the tail goes to lane 0; the lanes combine left to
// right. f's values go through a block buffer first: written as
// `acc[j] += f(k + j)` over a float[8], GCC left lane_max scalar (vmaxss per
// element) and built lane_sum's vectors by inserts, one element at a time;
// the buffer loop vectorizes at the clone's full width, and the lanes are one
// F32x8 (simd.h). (max ignores NaN; a NaN still poisons the exp sum.)
constexpr int kAcc = 8;
constexpr int64_t kLaneBlock = 256;   // f values buffered per block (1 KiB)
// An f32 row less a constant, x[k] - shift: read like the row itself, with
// no block buffer (layer norm's shifted sums).
struct ShiftedRow {
  const float* x;
  float shift;
};
template <typename F, typename Fold>
ENCORE_SIMD_INLINE F32x8 fold_lanes(int64_t n, F32x8 acc, F& f, Fold&& fold) {
  const int64_t n8 = n / kAcc * kAcc;
  if constexpr (std::is_pointer_v<F>) {   // f is the row itself (f32): no buffer
    for (int64_t k = 0; k < n8; k += kAcc) acc = fold(acc, load_f32x8(f + k));
  } else if constexpr (std::is_same_v<std::remove_cv_t<F>, ShiftedRow>) {
    for (int64_t k = 0; k < n8; k += kAcc) acc = fold(acc, load_f32x8(f.x + k) - f.shift);
  } else {
    alignas(64) float t[kLaneBlock];
    for (int64_t k0 = 0; k0 < n8; k0 += kLaneBlock) {
      const int64_t m = std::min(kLaneBlock, n8 - k0);
      for (int64_t i = 0; i < m; ++i) t[i] = f(k0 + i);
      for (int64_t i = 0; i < m; i += kAcc) acc = fold(acc, load_f32x8(t + i));
    }
  }
  return acc;
}
// The folds, as always-inlined functors (a lambda taking F32x8 by value was
// inlined too, but GCC still warned about its out-of-line ABI, -Wpsabi).
struct AddLanes {
  ENCORE_SIMD_INLINE F32x8 operator()(F32x8 a, F32x8 v) const { return a + v; }
};
struct MaxLanes {
  ENCORE_SIMD_INLINE F32x8 operator()(F32x8 a, F32x8 v) const { return max_f32x8(a, v); }
};
template <typename F>
ENCORE_SIMD_INLINE float at(F& f, int64_t k) {
  if constexpr (std::is_pointer_v<F>) {
    return f[k];
  } else if constexpr (std::is_same_v<std::remove_cv_t<F>, ShiftedRow>) {
    return f.x[k] - f.shift;
  } else {
    return f(k);
  }
}
// f: a functor of k, a const float* (the values themselves) or a ShiftedRow.
template <typename F>
ENCORE_SIMD_INLINE float lane_sum(int64_t n, F&& f) {
  F32x8 acc = fold_lanes(n, F32x8{}, f, AddLanes{});
  for (int64_t k = n / kAcc * kAcc; k < n; ++k) acc[0] += at(f, k);
  float s = 0;
  for (int j = 0; j < kAcc; ++j) s += acc[j];
  return s;
}
// The max does not depend on the order in which it meets the values (ties
// are equal values; only the sign of a zero maximum could differ, and x - m
// and exp(x - m) do not see it), so the f32 row form runs four accumulators
// to break the dependency chain of the compare-and-blend.
template <typename F>
ENCORE_SIMD_INLINE float lane_max(int64_t n, F&& f) {
  const F32x8 init = {kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf};
  F32x8 acc = init;
  int64_t k = 0;
  if constexpr (std::is_pointer_v<std::remove_reference_t<F>>) {
    F32x8 a1 = init, a2 = init, a3 = init;
    for (; k + 4 * kAcc <= n; k += 4 * kAcc) {
      acc = max_f32x8(acc, load_f32x8(f + k));
      a1 = max_f32x8(a1, load_f32x8(f + k + 8));
      a2 = max_f32x8(a2, load_f32x8(f + k + 16));
      a3 = max_f32x8(a3, load_f32x8(f + k + 24));
    }
    acc = max_f32x8(max_f32x8(acc, a1), max_f32x8(a2, a3));
    for (; k + kAcc <= n; k += kAcc) acc = max_f32x8(acc, load_f32x8(f + k));
  } else {
    acc = fold_lanes(n, init, f, MaxLanes{});
    k = n / kAcc * kAcc;
  }
  for (; k < n; ++k) acc[0] = std::max(acc[0], at(f, k));
  float m = kNegInf;
  for (int j = 0; j < kAcc; ++j) m = std::max(m, acc[j]);
  return m;
}

// e^x for the softmax family, where x is at most 0 (x - max, x - max - log(sum)) or
// -inf or NaN. Cephes' expf polynomial (about 1 ulp) on [-87, 87], with no
// call and no float compare, so the loops around it vectorize (std::exp is a
// scalar libm call). Outside that range: 0 below -87 (true results there are
// below 2^-125, subnormal), +inf above 87, NaN stays NaN.
ENCORE_SIMD_INLINE float exp_softmax(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t mag = bits & 0x7fffffffu, sign = bits & 0x80000000u;
  constexpr uint32_t kLimit = std::bit_cast<uint32_t>(87.0f);
  const float xc = std::bit_cast<float>((mag < kLimit ? mag : kLimit) | sign);   // clamped on the bit pattern
  // e^x = 2^n e^r with n = round(x / ln 2) (the 1.5 * 2^23 trick rounds to
  // nearest) and r = x - n ln 2 in two parts (Cody-Waite).
  constexpr float kRound = 12582912.0f;
  const float t = xc * 1.44269504088896341f + kRound;
  const float n = t - kRound;
  const int32_t ni = static_cast<int32_t>(std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(kRound));
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * r * r + r + 1.0f;
  const float e = y * std::bit_cast<float>(static_cast<uint32_t>(ni + 127) << 23);
  // Masks, not selects of e: a select would let GCC compute e only where it
  // is used, a branch around float ops that it then refuses to vectorize.
  const uint32_t outside = mag > kLimit ? ~0u : 0u;          // -inf and below -87: 0; above 87: inf
  const uint32_t nan = mag > 0x7f800000u ? ~0u : 0u;         // NaN stays NaN
  const uint32_t limit = sign != 0 ? 0u : 0x7f800000u;
  uint32_t out = (std::bit_cast<uint32_t>(e) & ~outside) | (limit & outside);
  out = (out & ~nan) | (bits & nan);
  return std::bit_cast<float>(out);
}

// Runs row(offset) on each row of [outer, n, inner] when inner == 1, else
// cols(offset, width) on each block of up to kLanes columns; `offset` is the
// element index of the first element. Parallel over rows or blocks.
template <typename Row, typename Cols>
void for_each_lane(int64_t outer, int64_t n, int64_t inner, Row&& row, Cols&& cols) {
  if (inner == 1) {
    parallel_for(outer, grain_for(n, kGrainTranscendental), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) row(r * n);
    });
    return;
  }
  const int64_t blocks = (inner + kLanes - 1) / kLanes;
  parallel_for(outer * blocks, grain_for(n * kLanes, kGrainTranscendental), [&](int64_t b, int64_t e) {
    for (int64_t u = b; u < e; ++u) {
      const int64_t o = u / blocks, j0 = (u % blocks) * kLanes;
      cols(o * n * inner + j0, std::min(kLanes, inner - j0));
    }
  });
}

// ---- softmax / log_softmax ----

template <typename T>
struct TypedSoftmaxArgs { const T* x; T* y; int64_t outer, n, inner; };
template <typename T>
struct TypedSoftmaxBackwardArgs { const T* g; const T* y; T* gx; int64_t outer, n, inner; };

// One contiguous row. f32 keeps exp(x - max) in y between passes; 16-bit
// types recompute it rather than round it twice. log_softmax is
// (x - max) - log(sum) (NOTE [ Log-sum-exp apart ]).
template <typename T, bool kLog>
ENCORE_SIMD_CLONES void softmax_row(const T* x, T* y, int64_t n) {
  constexpr bool kKeepExp = !kLog && std::is_same_v<T, float>;
  float m;
  if constexpr (std::is_same_v<T, float>) {
    m = lane_max(n, x);
  } else {
    m = lane_max(n, [&](int64_t k) { return ld(x[k]); });
  }
  float s;
  if constexpr (kKeepExp) {
    for (int64_t k = 0; k < n; ++k) y[k] = exp_softmax(ld(x[k]) - m);
    s = lane_sum(n, static_cast<const float*>(y));
  } else {
    s = lane_sum(n, [&](int64_t k) { return exp_softmax(ld(x[k]) - m); });
  }
  if constexpr (kLog) {
    const float log_sum = std::log(s);
    for (int64_t k = 0; k < n; ++k) y[k] = T((ld(x[k]) - m) - log_sum);
  } else {
    const float r = 1.0f / s;
    for (int64_t k = 0; k < n; ++k) y[k] = T((kKeepExp ? ld(y[k]) : exp_softmax(ld(x[k]) - m)) * r);
  }
}

// w adjacent columns, n elements each, `inner` apart.
template <typename T, bool kLog>
void softmax_cols(const T* x, T* y, int64_t n, int64_t inner, int64_t w) {
  float m[kLanes], s[kLanes];
  std::fill_n(m, w, kNegInf);
  std::fill_n(s, w, 0.0f);
  for (int64_t k = 0; k < n; ++k) {
    for (int64_t j = 0; j < w; ++j) m[j] = std::max(m[j], ld(x[k * inner + j]));
  }
  for (int64_t k = 0; k < n; ++k) {
    for (int64_t j = 0; j < w; ++j) s[j] += exp_softmax(ld(x[k * inner + j]) - m[j]);
  }
  for (int64_t j = 0; j < w; ++j) s[j] = kLog ? std::log(s[j]) : 1.0f / s[j];   // log(sum) or 1/sum
  for (int64_t k = 0; k < n; ++k) {
    const T* xr = x + k * inner;
    T* yr = y + k * inner;
    for (int64_t j = 0; j < w; ++j) {
      yr[j] = T(kLog ? (ld(xr[j]) - m[j]) - s[j] : exp_softmax(ld(xr[j]) - m[j]) * s[j]);
    }
  }
}

template <typename T, bool kLog>
void softmax_kernel(const TypedSoftmaxArgs<T>& a) {
  for_each_lane(
      a.outer, a.n, a.inner, [&](int64_t off) { softmax_row<T, kLog>(a.x + off, a.y + off, a.n); },
      [&](int64_t off, int64_t w) { softmax_cols<T, kLog>(a.x + off, a.y + off, a.n, a.inner, w); });
}

// softmax: gx = y * (g - sum(g * y)); log_softmax: gx = g - exp(y) * sum(g).
template <bool kLog>
ENCORE_SIMD_INLINE float softmax_grad(float g, float y, float s) {
  return kLog ? g - exp_softmax(y) * s : y * (g - s);
}

template <typename T, bool kLog>
ENCORE_SIMD_CLONES void softmax_backward_row(const T* g, const T* y, T* gx, int64_t n) {
  const float s = lane_sum(n, [&](int64_t k) { return kLog ? ld(g[k]) : ld(g[k]) * ld(y[k]); });
  for (int64_t k = 0; k < n; ++k) gx[k] = T(softmax_grad<kLog>(ld(g[k]), ld(y[k]), s));
}

template <typename T, bool kLog>
void softmax_backward_cols(const T* g, const T* y, T* gx, int64_t n, int64_t inner, int64_t w) {
  float s[kLanes];
  std::fill_n(s, w, 0.0f);
  for (int64_t k = 0; k < n; ++k) {
    for (int64_t j = 0; j < w; ++j) {
      const int64_t i = k * inner + j;
      s[j] += kLog ? ld(g[i]) : ld(g[i]) * ld(y[i]);
    }
  }
  for (int64_t k = 0; k < n; ++k) {
    for (int64_t j = 0; j < w; ++j) {
      const int64_t i = k * inner + j;
      gx[i] = T(softmax_grad<kLog>(ld(g[i]), ld(y[i]), s[j]));
    }
  }
}

template <typename T, bool kLog>
void softmax_backward_kernel(const TypedSoftmaxBackwardArgs<T>& a) {
  for_each_lane(
      a.outer, a.n, a.inner,
      [&](int64_t off) { softmax_backward_row<T, kLog>(a.g + off, a.y + off, a.gx + off, a.n); },
      [&](int64_t off, int64_t w) {
        softmax_backward_cols<T, kLog>(a.g + off, a.y + off, a.gx + off, a.n, a.inner, w);
      });
}

// ---- cross entropy ----

template <typename T, typename I>
struct TypedCrossEntropyArgs {
  const T* x;          // [rows, classes]
  const I* target;     // [rows]
  T* loss;             // 0-d
  float* stats;        // [2 * rows + 1]: max and log(sum) per row, then the count
  int64_t rows, classes, ignore_index;
};

template <typename T, typename I>
struct TypedCrossEntropyBackwardArgs {
  const T* x;
  const I* target;
  const float* stats;
  const T* grad_loss;  // 0-d: read here, so a replay sees this step's value
  T* gx;               // [rows, classes]
  int64_t rows, classes, ignore_index;
};

// stats[0] = max of the row, stats[1] = log of the sum of exp(x - max):
// kept apart, NOTE [ Log-sum-exp apart ].
template <typename T>
ENCORE_SIMD_CLONES void row_logsumexp(const T* x, int64_t n, float* stats) {
  float m;
  if constexpr (std::is_same_v<T, float>) {
    m = lane_max(n, x);
  } else {
    m = lane_max(n, [&](int64_t k) { return ld(x[k]); });
  }
  stats[0] = m;
  stats[1] = std::log(lane_sum(n, [&](int64_t k) { return exp_softmax(ld(x[k]) - m); }));
}

template <typename T, typename I>
void cross_entropy_kernel(const TypedCrossEntropyArgs<T, I>& a) {
  parallel_for(a.rows, grain_for(a.classes, kGrainTranscendental), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) row_logsumexp(a.x + r * a.classes, a.classes, a.stats + 2 * r);
  });
  // The mean in one fixed serial order (deterministic); N loads are cheap next to N*C exps.
  double total = 0;
  int64_t count = 0;
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t t = static_cast<int64_t>(a.target[r]);
    if (!backend::counted_class(t, a.classes, a.ignore_index)) {
      if (t != a.ignore_index) report_kernel_error(KernelError::kClassIndex);   // NOTE [ Index checks ]
      continue;
    }
    // log(sum) - (x[t] - max), in double: nothing rounds at the max's precision.
    const double shifted = static_cast<double>(ld(a.x[r * a.classes + t])) - static_cast<double>(a.stats[2 * r]);
    total += static_cast<double>(a.stats[2 * r + 1]) - shifted;
    ++count;
  }
  a.stats[2 * a.rows] = static_cast<float>(count);
  a.loss[0] = T(static_cast<float>(total / static_cast<double>(count)));   // 0 / 0 = NaN when none counted
}

// exp_softmax(z[i]) * scale over a flat block: one long loop that
// vectorizes even when rows are short (10 classes), unlike a loop per row.
ENCORE_SIMD_CLONES void scaled_exp(float* __restrict z, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) z[i] = exp_softmax(z[i]) * scale;
}

template <typename T, typename I>
void cross_entropy_backward_kernel(const TypedCrossEntropyBackwardArgs<T, I>& a) {
  const float count = a.stats[2 * a.rows];
  const float scale = count > 0 ? ld(a.grad_loss[0]) / count : 0.0f;
  parallel_for(a.rows, grain_for(a.classes, kGrainTranscendental), [&](int64_t b, int64_t e) {
    if constexpr (std::is_same_v<T, float>) {
      // gx holds (x - max) - log(sum) first, then one flat exp pass over
      // rows [b, e) (contiguous), then the target entries and the ignored
      // rows: each element gets exactly the operations of the per-row form below.
      for (int64_t r = b; r < e; ++r) {
        const float* xr = a.x + r * a.classes;
        float* gr = a.gx + r * a.classes;
        const float m = a.stats[2 * r], log_sum = a.stats[2 * r + 1];
        for (int64_t c = 0; c < a.classes; ++c) gr[c] = (xr[c] - m) - log_sum;
      }
      scaled_exp(a.gx + b * a.classes, (e - b) * a.classes, scale);
    }
    for (int64_t r = b; r < e; ++r) {
      const T* xr = a.x + r * a.classes;
      T* gr = a.gx + r * a.classes;
      const int64_t t = static_cast<int64_t>(a.target[r]);
      if (!backend::counted_class(t, a.classes, a.ignore_index)) {
        std::fill_n(gr, a.classes, T{});
        continue;
      }
      const float m = a.stats[2 * r], log_sum = a.stats[2 * r + 1];
      if constexpr (!std::is_same_v<T, float>) {
        for (int64_t c = 0; c < a.classes; ++c) gr[c] = T(exp_softmax((ld(xr[c]) - m) - log_sum) * scale);
      }
      gr[t] = T((exp_softmax((ld(xr[t]) - m) - log_sum) - 1.0f) * scale);
    }
  });
}

// ---- layer norm ----

template <typename T>
struct TypedLayerNormArgs {
  const T* x;          // [rows, cols]
  const T* w;          // [cols] or null
  const T* b;          // [cols] or null
  T* y;                // [rows, cols]
  float* stats;        // [rows, 2]: mean, rstd
  int64_t rows, cols;
  float eps;
};

template <typename T>
struct TypedLayerNormBackwardArgs {
  const T* g;          // [rows, cols]
  const T* x;
  const T* w;          // or null (weight 1)
  const float* stats;
  T* dx;               // each output may be null (not wanted)
  T* dw;
  T* db;
  float* partial;      // [blocks, 2, cols] scratch (null when neither dw nor db)
  int64_t rows, cols, blocks, rows_per_block;
};

// Calls f(std::bool_constant<a>{}, std::bool_constant<b>{}): per-launch flags
// (weight present, bias present) become template arguments, so row loops
// carry no branches and vectorize.
template <typename F>
void with_flags(bool a, bool b, F&& f) {
  if (a) {
    b ? f(std::true_type{}, std::true_type{}) : f(std::true_type{}, std::false_type{});
  } else {
    b ? f(std::false_type{}, std::true_type{}) : f(std::false_type{}, std::false_type{});
  }
}

// NOTE [ Layer norm's shifted mean ] (kernel_table.h, LayerNormArgs): each
// row is normalised as d = x - x[0], so stats hold the mean of d.
template <typename T>
ENCORE_SIMD_INLINE float row_shift(const T* x, int64_t cols) { return cols > 0 ? ld(x[0]) : 0.0f; }

template <typename T, bool kWeight, bool kBias>
ENCORE_SIMD_CLONES void layer_norm_row(const TypedLayerNormArgs<T>& a, int64_t r) {
  const T* x = a.x + r * a.cols;
  T* y = a.y + r * a.cols;
  const float n = static_cast<float>(a.cols), shift = row_shift(x, a.cols);
  auto d = [&](int64_t c) { return ld(x[c]) - shift; };
  // Two passes over the shifted row: no cancellation when |mean| >> std.
  float mean;
  if constexpr (std::is_same_v<T, float>) {
    mean = lane_sum(a.cols, ShiftedRow{x, shift}) / n;
  } else {
    mean = lane_sum(a.cols, d) / n;
  }
  const float var = lane_sum(a.cols, [&](int64_t c) { return (d(c) - mean) * (d(c) - mean); }) / n;
  const float rstd = 1.0f / std::sqrt(var + a.eps);
  for (int64_t c = 0; c < a.cols; ++c) {
    float v = (d(c) - mean) * rstd;
    if constexpr (kWeight) v *= ld(a.w[c]);
    if constexpr (kBias) v += ld(a.b[c]);
    y[c] = T(v);
  }
  a.stats[2 * r] = mean;
  a.stats[2 * r + 1] = rstd;
}

template <typename T>
void layer_norm_kernel(const TypedLayerNormArgs<T>& a) {
  with_flags(a.w != nullptr, a.b != nullptr, [&](auto has_w, auto has_b) {
    parallel_for(a.rows, grain_for(a.cols, kGrainElementwise), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) layer_norm_row<T, has_w.value, has_b.value>(a, r);
    });
  });
}

// With xh = (x - mean) * rstd and gw = g * w:
// dx = rstd * (gw - mean(gw) - xh * mean(gw * xh)); dw += g * xh; db += g.
// (x - mean is (x - x[0]) - stats' mean, NOTE [ Layer norm's shifted mean ].)
// part: this row block's partial sums, [2, cols] = {dw, db} (null when not wanted).
template <typename T, bool kWeight>
ENCORE_SIMD_CLONES void layer_norm_backward_row(const TypedLayerNormBackwardArgs<T>& a, int64_t r, float* part) {
  const T* g = a.g + r * a.cols;
  const T* x = a.x + r * a.cols;
  const float mean = a.stats[2 * r], rstd = a.stats[2 * r + 1], shift = row_shift(x, a.cols);
  auto xh = [&](int64_t c) { return (ld(x[c]) - shift - mean) * rstd; };   // the forward's operations
  auto gw = [&](int64_t c) {
    if constexpr (kWeight) return ld(g[c]) * ld(a.w[c]);
    else return ld(g[c]);
  };
  if (part != nullptr) {
    for (int64_t c = 0; c < a.cols; ++c) {
      part[c] += ld(g[c]) * xh(c);
      part[a.cols + c] += ld(g[c]);
    }
  }
  if (a.dx == nullptr) return;
  const float inv_n = 1.0f / static_cast<float>(a.cols);
  const float m1 = lane_sum(a.cols, gw) * inv_n;
  const float m2 = lane_sum(a.cols, [&](int64_t c) { return gw(c) * xh(c); }) * inv_n;
  T* dx = a.dx + r * a.cols;
  for (int64_t c = 0; c < a.cols; ++c) dx[c] = T(rstd * (gw(c) - m1 - xh(c) * m2));
}

// dw/db: the block partials summed in block order, the same for any thread count.
template <typename T>
void layer_norm_combine(const TypedLayerNormBackwardArgs<T>& a) {
  const int64_t cols = a.cols;
  parallel_for(cols, grain_for(a.blocks * 2, kGrainElementwise), [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      float sw = 0, sb = 0;
      for (int64_t blk = 0; blk < a.blocks; ++blk) {
        sw += a.partial[blk * 2 * cols + c];
        sb += a.partial[(blk * 2 + 1) * cols + c];
      }
      if (a.dw != nullptr) a.dw[c] = T(sw);
      if (a.db != nullptr) a.db[c] = T(sb);
    }
  });
}

template <typename T>
void layer_norm_backward_kernel(const TypedLayerNormBackwardArgs<T>& a) {
  const int64_t cols = a.cols;
  with_flags(a.w != nullptr, false, [&](auto has_w, auto) {
    parallel_for(a.blocks, grain_for(a.rows_per_block * cols, kGrainElementwise), [&](int64_t b, int64_t e) {
      for (int64_t blk = b; blk < e; ++blk) {
        float* part = a.partial != nullptr ? a.partial + blk * 2 * cols : nullptr;
        if (part != nullptr) std::fill_n(part, 2 * cols, 0.0f);
        const int64_t r1 = std::min(a.rows, (blk + 1) * a.rows_per_block);
        for (int64_t r = blk * a.rows_per_block; r < r1; ++r) layer_norm_backward_row<T, has_w.value>(a, r, part);
      }
    });
  });
  if (a.partial != nullptr) layer_norm_combine(a);
}

// ---- embedding ----

template <typename T, typename I>
struct TypedEmbeddingArgs { const T* w; const I* idx; T* out; int64_t n, vocab, dim; };
template <typename T, typename I>
struct TypedEmbeddingBackwardArgs {
  const T* g;
  const I* idx;
  T* gw;
  compute_t<T>* sums;   // [vocab, dim]: gw itself for f32; for f16/bf16 the f32 workspace
  int64_t n, vocab, dim;
};

template <typename T, typename I>
void embedding_kernel(const TypedEmbeddingArgs<T, I>& a) {
  parallel_for(a.n, grain_for(a.dim, kGrainElementwise), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t v = static_cast<int64_t>(a.idx[i]);
      T* o = a.out + i * a.dim;
      if (v >= 0 && v < a.vocab) {
        std::memcpy(o, a.w + v * a.dim, a.dim * sizeof(T));
      } else {
        std::fill_n(o, a.dim, T{});   // NOTE [ Index checks ] in kernel_table.h
        report_kernel_error(KernelError::kEmbeddingIndex);
      }
    }
  });
}

// Each thread owns rows [v0, v1) of grad_weight, zeroes their sums and adds,
// in index order, every gradient row whose index falls in its range. The
// sums are f32 (in gw itself for f32); f16/bf16 round them into gw once at
// the end, not at each add (a bf16 sum of ones stops growing at 256).
template <typename T, typename I>
void embedding_backward_kernel(const TypedEmbeddingBackwardArgs<T, I>& a) {
  using C = compute_t<T>;
  const bool big = (a.vocab + a.n) * a.dim > kGrainElementwise;
  parallel_for(a.vocab, big ? 1 : a.vocab, [&](int64_t v0, int64_t v1) {
    std::fill(a.sums + v0 * a.dim, a.sums + v1 * a.dim, C{});
    for (int64_t i = 0; i < a.n; ++i) {
      const int64_t v = static_cast<int64_t>(a.idx[i]);
      if (v < v0 || v >= v1) continue;
      C* row = a.sums + v * a.dim;
      const T* g = a.g + i * a.dim;
      for (int64_t c = 0; c < a.dim; ++c) row[c] += C(g[c]);
    }
    if constexpr (!std::is_same_v<C, T>) {
      for (int64_t e = v0 * a.dim; e < v1 * a.dim; ++e) a.gw[e] = T(a.sums[e]);
    }
  });
}

// f16/bf16: the f32 sums of every row (embedding_backward_kernel); f32: none.
int64_t embedding_backward_workspace(const backend::EmbeddingBackwardArgs& a, const char** /*why*/) {
  return a.dtype == DType::kFloat32 ? 0 : a.vocab * a.dim * static_cast<int64_t>(sizeof(float));
}

// ---- dropout ----

template <typename T>
struct TypedDropoutArgs {
  const T* x;
  T* y;
  bool* mask;          // or null (no backward)
  int64_t* state;      // {seed, offset}: read and advanced here, so replays draw fresh masks
  int64_t n;
  float p, scale;
};
template <typename T>
struct TypedDropoutBackwardArgs { const T* g; const bool* mask; T* gx; int64_t n; float scale; };

template <typename T>
void dropout_kernel(const TypedDropoutArgs<T>& a) {
  const uint64_t seed = static_cast<uint64_t>(a.state[0]);
  const uint64_t offset = static_cast<uint64_t>(a.state[1]);
  parallel_for(a.n, kGrainTranscendental, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const bool keep = backend::dropout_keep(seed, offset, i, a.p);
      a.y[i] = T(ld(a.x[i]) * (keep ? a.scale : 0.0f));
      if (a.mask != nullptr) a.mask[i] = keep;
    }
  });
  a.state[1] = static_cast<int64_t>(offset + static_cast<uint64_t>(a.n));
}

template <typename T>
void dropout_backward_kernel(const TypedDropoutBackwardArgs<T>& a) {
  parallel_for(a.n, kGrainElementwise, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) a.gx[i] = T(ld(a.g[i]) * (a.mask[i] ? a.scale : 0.0f));
  });
}

// ---- kernel table entries: the runtime dtype picked once per launch ----
// (NOTE [ Specialized kernels ] in src/core/kernel.h: a replay calls the typed entry directly)

// i32 or i64 index types (the host checked which).
template <typename F>
void dispatch_index(DType t, F&& f) {
  if (t == DType::kInt32) return f(Tag<int32_t>{});
  return f(Tag<int64_t>{});
}

template <typename T>
const T* cptr(const void* p) { return static_cast<const T*>(p); }
template <typename T>
T* ptr(void* p) { return static_cast<T*>(p); }

template <typename T>
struct SoftmaxEntry {
  static void run(const backend::SoftmaxArgs& a) {
    const TypedSoftmaxArgs<T> t{cptr<T>(a.x), ptr<T>(a.y), a.outer, a.n, a.inner};
    if (a.log) return softmax_kernel<T, true>(t);
    softmax_kernel<T, false>(t);
  }
};

template <typename T>
struct SoftmaxBackwardEntry {
  static void run(const backend::SoftmaxBackwardArgs& a) {
    const TypedSoftmaxBackwardArgs<T> t{cptr<T>(a.g), cptr<T>(a.y), ptr<T>(a.gx), a.outer, a.n, a.inner};
    if (a.log) return softmax_backward_kernel<T, true>(t);
    softmax_backward_kernel<T, false>(t);
  }
};

template <typename T>
struct CrossEntropyEntry {
  static void run(const backend::CrossEntropyArgs& a) {
    dispatch_index(a.index, [&](auto itag) {
      using I = typename decltype(itag)::type;
      cross_entropy_kernel<T, I>(TypedCrossEntropyArgs<T, I>{cptr<T>(a.x), cptr<I>(a.target), ptr<T>(a.loss),
                                                             a.stats, a.rows, a.classes, a.ignore_index});
    });
  }
};

template <typename T>
struct CrossEntropyBackwardEntry {
  static void run(const backend::CrossEntropyBackwardArgs& a) {
    dispatch_index(a.index, [&](auto itag) {
      using I = typename decltype(itag)::type;
      cross_entropy_backward_kernel<T, I>(TypedCrossEntropyBackwardArgs<T, I>{
          cptr<T>(a.x), cptr<I>(a.target), a.stats, cptr<T>(a.grad_loss), ptr<T>(a.gx), a.rows, a.classes,
          a.ignore_index});
    });
  }
};

template <typename T>
struct LayerNormEntry {
  static void run(const backend::LayerNormArgs& a) {
    layer_norm_kernel<T>(TypedLayerNormArgs<T>{cptr<T>(a.x), cptr<T>(a.w), cptr<T>(a.b), ptr<T>(a.y), a.stats,
                                               a.rows, a.cols, a.eps});
  }
};

template <typename T>
struct LayerNormBackwardEntry {
  static void run(const backend::LayerNormBackwardArgs& a) {
    layer_norm_backward_kernel<T>(TypedLayerNormBackwardArgs<T>{
        cptr<T>(a.g), cptr<T>(a.x), cptr<T>(a.w), a.stats, ptr<T>(a.dx), ptr<T>(a.dw), ptr<T>(a.db), a.partial,
        a.rows, a.cols, a.chunks, a.rows_per_chunk});
  }
};

template <typename T>
struct EmbeddingEntry {
  static void run(const backend::EmbeddingArgs& a) {
    dispatch_index(a.index, [&](auto itag) {
      using I = typename decltype(itag)::type;
      embedding_kernel<T, I>(
          TypedEmbeddingArgs<T, I>{cptr<T>(a.w), cptr<I>(a.idx), ptr<T>(a.out), a.n, a.vocab, a.dim});
    });
  }
};

template <typename T>
struct EmbeddingBackwardEntry {
  static void run(const backend::EmbeddingBackwardArgs& a) {
    dispatch_index(a.index, [&](auto itag) {
      using I = typename decltype(itag)::type;
      using C = compute_t<T>;
      C* sums = nullptr;
      if constexpr (std::is_same_v<C, T>) sums = ptr<T>(a.gw);
      else sums = ptr<C>(a.workspace);
      embedding_backward_kernel<T, I>(
          TypedEmbeddingBackwardArgs<T, I>{cptr<T>(a.g), cptr<I>(a.idx), ptr<T>(a.gw), sums, a.n, a.vocab, a.dim});
    });
  }
};

template <typename T>
struct DropoutEntry {
  static void run(const backend::DropoutArgs& a) {
    dropout_kernel<T>(TypedDropoutArgs<T>{cptr<T>(a.x), ptr<T>(a.y), a.mask, a.state, a.n, a.p, a.scale});
  }
};

template <typename T>
struct DropoutBackwardEntry {
  static void run(const backend::DropoutBackwardArgs& a) {
    dropout_backward_kernel<T>(TypedDropoutBackwardArgs<T>{cptr<T>(a.g), a.mask, ptr<T>(a.gx), a.n, a.scale});
  }
};

}  // namespace

extern const backend::NnKernels kNn = {
    .softmax = specialized_kernel<&pick_float<SoftmaxEntry, backend::SoftmaxArgs>>(),
    .softmax_backward = specialized_kernel<&pick_float<SoftmaxBackwardEntry, backend::SoftmaxBackwardArgs>>(),
    .cross_entropy = specialized_kernel<&pick_float<CrossEntropyEntry, backend::CrossEntropyArgs>>(),
    .cross_entropy_backward =
        specialized_kernel<&pick_float<CrossEntropyBackwardEntry, backend::CrossEntropyBackwardArgs>>(),
    .layer_norm = specialized_kernel<&pick_float<LayerNormEntry, backend::LayerNormArgs>>(),
    .layer_norm_backward = specialized_kernel<&pick_float<LayerNormBackwardEntry, backend::LayerNormBackwardArgs>>(),
    .embedding = specialized_kernel<&pick_numeric<EmbeddingEntry, backend::EmbeddingArgs>>(),
    .embedding_backward = specialized_kernel<&pick_float<EmbeddingBackwardEntry, backend::EmbeddingBackwardArgs>>(),
    .dropout = specialized_kernel<&pick_float<DropoutEntry, backend::DropoutArgs>>(),
    .dropout_backward = specialized_kernel<&pick_float<DropoutBackwardEntry, backend::DropoutBackwardArgs>>(),
    .layer_norm_max_chunks = kMaxRowBlocks,
    .embedding_backward_workspace = &embedding_backward_workspace,   // f16/bf16: the f32 sums
    .error_word = nullptr,   // the kernels call report_kernel_error()
};

}  // namespace encore::cpu
