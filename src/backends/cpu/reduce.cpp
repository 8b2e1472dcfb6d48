// The CPU kernels of the reductions: sum, mean, var (as a sum of squared
// deviations), max/argmax with first-index ties, and the scatter that routes
// max's gradient (contracts: SumArgs, MaxArgs, MaxBackwardArgs in
// src/backends/kernel_table.h; host side: src/backends/reduce.cpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "src/backends/cpu/dispatch.h"
#include "src/backends/cpu/parallel.h"
#include "src/backends/cpu/simd.h"
#include "src/backends/kernel_table.h"

namespace encore::cpu {
namespace {

using namespace backend;   // the shared argument structs, kinds and formulas

// ---- geometry ----

// The loop a reduction runs, chosen from the merged geometry (NOTE
// [ Reduction geometry ] in kernel_table.h).
enum class ReduceKind : int32_t {
  kFull,     // one output: the reduced range splits into blocks whose partials combine in order
  kRows,     // outputs in parallel, each over its reduced elements in runs along the innermost reduced dim
  kColumns,  // innermost kept dim has stride 1: a block of adjacent outputs advances together (vectorizes)
};

ReduceKind kind_of(const ReduceGeom& g) {
  if (g.out_numel == 1) return ReduceKind::kFull;
  if (g.red_stride[g.red_ndim - 1] != 1 && g.kept_stride[g.kept_ndim - 1] == 1) return ReduceKind::kColumns;
  return ReduceKind::kRows;
}

inline constexpr int64_t kPairwiseBlock = 256;   // elements summed by 8 lanes before the pairwise tree
// Adjacent outputs updated together in the column loop: 1024 f32 is a 4 KiB
// page per reduced element, which keeps the hardware prefetcher streaming
// (256 measured 3x slower on a [4096, 4096] -> [4096] sum).
inline constexpr int64_t kColumnBlock = 1024;
inline constexpr int64_t kColumnRows = 256;      // reduced elements per column lane before it folds
inline constexpr int64_t kMaxBlocks = 64;        // blocks of a full reduction (partials live on the stack)

// Input offset (elements) of output o's first reduced element.
inline int64_t kept_offset(const ReduceGeom& g, int64_t o) {
  int64_t off = 0;
  for (int d = g.kept_ndim - 1; d >= 0; --d) {
    off += (o % g.kept_shape[d]) * g.kept_stride[d];
    o /= g.kept_shape[d];
  }
  return off;
}

// One reduced element (row) of an f32 column max: w adjacent outputs, each
// taking row[c] when it beats best[c] (greater, or the first NaN), with its
// index r; branch-free selects, so the loop vectorizes per clone.
ENCORE_SIMD_CLONES void max_column_step(float* __restrict best, int64_t* __restrict at, const float* __restrict row,
                                        int64_t w, int64_t r) {
  for (int64_t c = 0; c < w; ++c) {
    const float x = row[c], b = best[c];
    const bool take = x > b || (x != x && b == b);
    best[c] = take ? x : b;
    at[c] = take ? r : at[c];
  }
}

// ---- reduction drivers (R: a reducer, see SumReducer and MaxReducer) ----

// Accumulates the reduced elements [begin, end) (row-major over the reduced
// dims) of output o, whose first element is x, in runs along the innermost
// reduced dim. Needs red_numel > 0.
template <typename R>
void reduce_range(const R& r, const ReduceGeom& g, const typename R::In* x, int64_t o, int64_t begin, int64_t end,
                  typename R::Acc& acc) {
  const int inner = g.red_ndim - 1;
  int64_t idx[backend::kLayoutMaxDims];
  int64_t off = 0, rem = begin;
  for (int d = inner; d >= 0; --d) {
    idx[d] = rem % g.red_shape[d];
    rem /= g.red_shape[d];
    off += idx[d] * g.red_stride[d];
  }
  for (int64_t pos = begin; pos < end;) {
    const int64_t run = std::min(end - pos, g.red_shape[inner] - idx[inner]);
    r.run(acc, x + off, run, g.red_stride[inner], o, pos);
    pos += run;
    if (pos == end) break;
    // The run reached the end of the innermost dim: rewind it, carry into the outer ones.
    off -= idx[inner] * g.red_stride[inner];
    idx[inner] = 0;
    for (int d = inner - 1; d >= 0; --d) {
      off += g.red_stride[d];
      if (++idx[d] < g.red_shape[d]) break;
      off -= g.red_shape[d] * g.red_stride[d];
      idx[d] = 0;
    }
  }
}

// One output: kMaxBlocks partials at most, their count fixed by red_numel
// alone, so the result does not depend on the number of threads.
template <typename R>
void run_full(const R& r, const ReduceGeom& g) {
  const auto* x = static_cast<const typename R::In*>(g.in);
  const int64_t n = g.red_numel;
  const int64_t blocks = std::clamp<int64_t>(n / kGrainElementwise, 1, kMaxBlocks);
  typename R::Acc partial[kMaxBlocks];
  parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      partial[b] = typename R::Acc{};
      reduce_range(r, g, x, 0, b * n / blocks, (b + 1) * n / blocks, partial[b]);
    }
  });
  for (int64_t b = 1; b < blocks; ++b) r.merge(partial[0], partial[b]);
  r.store(0, partial[0]);
}

template <typename R>
void run_rows(const R& r, const ReduceGeom& g) {
  const auto* x = static_cast<const typename R::In*>(g.in);
  parallel_for(g.out_numel, std::max<int64_t>(1, kGrainElementwise / g.red_numel), [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      typename R::Acc acc{};
      reduce_range(r, g, x + kept_offset(g, o), o, 0, g.red_numel, acc);
      r.store(o, acc);
    }
  });
}

// Outputs o0 .. o0 + w - 1 (adjacent, stride 1 in the input from x): for each
// reduced element (outer loop) every lane takes one input (inner loop, stride
// 1, vectorizes); four reduced elements per pass, so each lane is loaded and
// stored once per four inputs. Lanes fold into the accumulators every
// kColumnRows reduced elements, a two-level cascade that bounds the error of
// long columns.
template <typename R>
void column_block(const R& r, const ReduceGeom& g, const typename R::In* x, int64_t o0, int64_t w) {
  using In = typename R::In;
  if constexpr (R::kFloatColumns) {   // f32 max: the first row seeds the lanes, max_column_step does the rest
    float best[kColumnBlock];
    int64_t at[kColumnBlock];
    int64_t idx[backend::kLayoutMaxDims] = {};
    int64_t off = 0;
    for (int64_t ri = 0; ri < g.red_numel; ++ri) {
      const float* row = x + off;
      if (ri == 0) {
        for (int64_t c = 0; c < w; ++c) best[c] = row[c];
        std::fill_n(at, w, int64_t{0});
      } else {
        max_column_step(best, at, row, w, ri);
      }
      for (int d = g.red_ndim - 1; d >= 0; --d) {   // step the odometer over the reduced dims
        off += g.red_stride[d];
        if (++idx[d] < g.red_shape[d]) break;
        off -= g.red_shape[d] * g.red_stride[d];
        idx[d] = 0;
      }
    }
    for (int64_t c = 0; c < w; ++c) r.store(o0 + c, typename R::Acc{best[c], at[c]});
    return;
  }
  typename R::Acc acc[kColumnBlock];
  typename R::Lane lane[kColumnBlock];
  for (int64_t c = 0; c < w; ++c) acc[c] = typename R::Acc{};
  int64_t idx[backend::kLayoutMaxDims] = {};
  int64_t off = 0;
  auto next_row = [&] {   // the current reduced element, then step the odometer
    const In* row = x + off;
    for (int d = g.red_ndim - 1; d >= 0; --d) {
      off += g.red_stride[d];
      if (++idx[d] < g.red_shape[d]) break;
      off -= g.red_shape[d] * g.red_stride[d];
      idx[d] = 0;
    }
    return row;
  };
  for (int64_t r0 = 0; r0 < g.red_numel; r0 += kColumnRows) {
    const int64_t r1 = std::min(g.red_numel, r0 + kColumnRows);
    for (int64_t c = 0; c < w; ++c) lane[c] = typename R::Lane{};
    int64_t ri = r0;
    for (; ri + 4 <= r1; ri += 4) {
      const In* p0 = next_row();
      const In* p1 = next_row();
      const In* p2 = next_row();
      const In* p3 = next_row();
      for (int64_t c = 0; c < w; ++c) {
        r.add_lane(lane[c], p0[c], o0 + c, ri);
        r.add_lane(lane[c], p1[c], o0 + c, ri + 1);
        r.add_lane(lane[c], p2[c], o0 + c, ri + 2);
        r.add_lane(lane[c], p3[c], o0 + c, ri + 3);
      }
    }
    for (; ri < r1; ++ri) {
      const In* p0 = next_row();
      for (int64_t c = 0; c < w; ++c) r.add_lane(lane[c], p0[c], o0 + c, ri);
    }
    for (int64_t c = 0; c < w; ++c) r.merge_lane(acc[c], lane[c]);
  }
  for (int64_t c = 0; c < w; ++c) r.store(o0 + c, acc[c]);
}

template <typename R>
void run_columns(const R& r, const ReduceGeom& g) {
  const auto* x = static_cast<const typename R::In*>(g.in);
  const int64_t k = g.kept_shape[g.kept_ndim - 1];
  const int64_t blocks_per_row = (k + kColumnBlock - 1) / kColumnBlock;
  const int64_t units = g.out_numel / k * blocks_per_row;
  const int64_t work = g.red_numel * std::min(k, kColumnBlock);
  parallel_for(units, std::max<int64_t>(1, kGrainElementwise / work), [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t c0 = (u % blocks_per_row) * kColumnBlock;
      const int64_t o0 = (u / blocks_per_row) * k + c0;
      column_block(r, g, x + kept_offset(g, o0), o0, std::min(kColumnBlock, k - c0));
    }
  });
}

template <typename R>
void run_reduce(const R& r, const ReduceGeom& g) {
  if (g.out_numel == 0) return;
  if (g.red_numel == 0) {   // empty reduction: every output gets the empty accumulator
    parallel_for(g.out_numel, kGrainElementwise, [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) r.store(o, typename R::Acc{});
    });
    return;
  }
  switch (kind_of(g)) {
    case ReduceKind::kFull: return run_full(r, g);
    case ReduceKind::kRows: return run_rows(r, g);
    case ReduceKind::kColumns: return run_columns(r, g);
  }
}

// ---- vector leaves (ENCORE_SIMD_CLONES: one clone per x86-64 level) ----

// The 8-lane sum of f32 x[0], x[s], ... x[(n - 1) s] (n <= kPairwiseBlock),
// mapped to (x - mean)^2 when kSqDev: lane j adds elements j, j + 8, ...;
// the lanes combine as ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)),
// then the tail (n % 8 elements, in order). F32x8 lanes (simd.h): the clones
// run them as one AVX register, the default as two SSE ones; same bits.
template <bool kSqDev, bool kContiguous>
ENCORE_SIMD_CLONES float sum_block_f32(const float* x, int64_t n, int64_t stride, float mean) {
  const int64_t s = kContiguous ? 1 : stride;
  F32x8 lane = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    F32x8 v;
    if constexpr (kContiguous) {
      v = load_f32x8(x + i);
    } else {
      for (int j = 0; j < 8; ++j) v[j] = x[(i + j) * s];
    }
    if constexpr (kSqDev) {
      v -= mean;
      v *= v;
    }
    lane += v;
  }
  float tail = 0;
  for (; i < n; ++i) {
    float v = x[i * s];
    if constexpr (kSqDev) v = (v - mean) * (v - mean);
    tail += v;
  }
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7])) + tail;
}

// The index of the first maximum of f32 x[0, n) (n >= 1): the first NaN if
// there is one, else the first element equal to the max. The max and the
// NaN flag come from four F32x8 accumulators (the max of a set does not
// depend on the order it is met in), then a vector scan finds the first
// match 8 elements at a time.
ENCORE_SIMD_CLONES int64_t argmax_f32(const float* x, int64_t n) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const F32x8 init = {kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf};
  F32x8 a0 = init, a1 = init, a2 = init, a3 = init;
  I32x8 nan = {};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const F32x8 v0 = load_f32x8(x + i), v1 = load_f32x8(x + i + 8);
    const F32x8 v2 = load_f32x8(x + i + 16), v3 = load_f32x8(x + i + 24);
    a0 = max_f32x8(a0, v0);
    a1 = max_f32x8(a1, v1);
    a2 = max_f32x8(a2, v2);
    a3 = max_f32x8(a3, v3);
    nan |= (v0 != v0) | (v1 != v1) | (v2 != v2) | (v3 != v3);
  }
  a0 = max_f32x8(max_f32x8(a0, a1), max_f32x8(a2, a3));
  for (; i + 8 <= n; i += 8) {
    const F32x8 v = load_f32x8(x + i);
    a0 = max_f32x8(a0, v);
    nan |= v != v;
  }
  float best = a0[0];
  bool any_nan = false;
  for (int j = 0; j < 8; ++j) {
    best = a0[j] > best ? a0[j] : best;
    any_nan = any_nan || nan[j] != 0;
  }
  for (; i < n; ++i) {
    best = x[i] > best ? x[i] : best;
    any_nan = any_nan || x[i] != x[i];
  }
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const F32x8 v = load_f32x8(x + k);
    const I32x8 hit = any_nan ? (v != v) : (v == best);
    bool any = false;
    for (int j = 0; j < 8; ++j) any = any || hit[j] != 0;
    if (any) break;
  }
  for (; k < n - 1; ++k) {
    if (any_nan ? x[k] != x[k] : x[k] == best) break;
  }
  return std::min(k, n - 1);   // some element always matches; the bound only guards the read
}

// ---- sum, mean, var ----

// NOTE [ Summation error ]
// Floats (f16/bf16 included) accumulate in f32: runs along the innermost
// reduced dim are summed pairwise (blocks of kPairwiseBlock by 8 lanes, then
// a binary tree), the column loop folds lanes of kColumnRows elements, and
// those partial sums combine by Kahan summation. With u = 2^-24, the error
// is at most about (kPairwiseBlock / 8 + log2(n / kPairwiseBlock) + 4) u
// sum|x| (rows), or (kColumnRows + 2) u sum|x| (columns): 1.5e-5 sum|x| in
// the worst case, independent of n beyond a logarithm. f16/bf16 outputs then
// round once more (2^-11, 2^-8 relative). Integers and bool accumulate in
// uint64 (wrapping, so overflow is defined) and convert to the output type.
template <typename T, typename TOut, SumMode kMode>
struct SumReducer {
  using In = T;
  using C = std::conditional_t<std::is_floating_point_v<compute_t<T>>, float, uint64_t>;
  static constexpr bool kFloat = std::is_same_v<C, float>;
  struct Acc { C sum = 0; C comp = 0; };   // comp: Kahan compensation (floats)
  static constexpr bool kFloatColumns = false;
  using Lane = C;
  const SumArgs& a;

  C map(T x, int64_t o) const {
    if constexpr (kMode == SumMode::kSquaredDeviation) {
      const float d = static_cast<float>(x) - a.mean[o];
      return d * d;
    } else if constexpr (kFloat) {
      return static_cast<float>(x);
    } else {
      return static_cast<uint64_t>(static_cast<int64_t>(x));
    }
  }

  template <bool kContiguous>
  C pairwise(const T* x, int64_t n, int64_t stride, int64_t o) const {
    const int64_t s = kContiguous ? 1 : stride;
    if (n > kPairwiseBlock) {
      const int64_t half = n / 2 / 8 * 8;
      return pairwise<kContiguous>(x, half, stride, o) + pairwise<kContiguous>(x + half * s, n - half, stride, o);
    }
    if constexpr (std::is_same_v<T, float>) {   // the same sum, vectorized per x86-64 level
      constexpr bool kSqDev = kMode == SumMode::kSquaredDeviation;
      return sum_block_f32<kSqDev, kContiguous>(x, n, stride, kSqDev ? a.mean[o] : 0.0f);
    }
    C lane[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      for (int j = 0; j < 8; ++j) lane[j] += map(x[(i + j) * s], o);
    }
    C tail = 0;
    for (; i < n; ++i) tail += map(x[i * s], o);
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7])) + tail;
  }

  void add(Acc& acc, C v) const {
    if constexpr (kFloat) {
      const float y = v - acc.comp;
      const float t = acc.sum + y;
      acc.comp = std::isfinite(t) ? (t - acc.sum) - y : 0.0f;   // an inf or NaN sum stays as it is
      acc.sum = t;
    } else {
      acc.sum += v;
    }
  }

  void run(Acc& acc, const T* x, int64_t n, int64_t stride, int64_t o, int64_t) const {
    add(acc, stride == 1 ? pairwise<true>(x, n, 1, o) : pairwise<false>(x, n, stride, o));
  }
  void add_lane(Lane& lane, T x, int64_t o, int64_t) const { lane += map(x, o); }
  void merge_lane(Acc& acc, Lane lane) const { add(acc, lane); }
  void merge(Acc& acc, const Acc& b) const { add(acc, b.sum - b.comp); }

  void store(int64_t o, const Acc& acc) const {
    TOut* out = static_cast<TOut*>(a.out);
    if constexpr (!kFloat) {
      out[o] = static_cast<TOut>(static_cast<int64_t>(acc.sum));
    } else if constexpr (kMode == SumMode::kSum) {
      out[o] = TOut(acc.sum - acc.comp);
    } else {
      out[o] = TOut(static_cast<float>(static_cast<double>(acc.sum - acc.comp) / a.divisor));
    }
  }
};

template <typename T, typename TOut, SumMode kMode>
void sum_kernel(const SumArgs& a) {
  run_reduce(SumReducer<T, TOut, kMode>{a}, a.g);
}

// ---- max, argmax ----

template <typename T, bool kValues>
struct MaxReducer {
  using In = T;
  using C = compute_t<T>;
  struct Acc { C v{}; int64_t i = -1; };   // i < 0: nothing seen yet
  static constexpr bool kFloatColumns = std::is_same_v<T, float>;   // column_block's vector path
  using Lane = Acc;
  const MaxArgs& a;

  // Strictly greater keeps the first of equal values; a NaN beats any number
  // and nothing beats a NaN, so the first NaN wins.
  static bool better(C v, C best) {
    if constexpr (std::is_floating_point_v<C>) {
      return v > best || (std::isnan(v) && !std::isnan(best));
    } else {
      return v > best;
    }
  }
  void add_lane(Acc& acc, T x, int64_t, int64_t r) const {
    const C v = static_cast<C>(x);
    if (acc.i < 0 || better(v, acc.v)) acc = Acc{v, r};
  }
  void run(Acc& acc, const T* x, int64_t n, int64_t stride, int64_t o, int64_t r0) const {
    if constexpr (std::is_same_v<T, float>) {
      if (stride == 1) return run_contiguous(acc, x, n, r0);
    }
    for (int64_t i = 0; i < n; ++i) add_lane(acc, x[i * stride], o, r0 + i);
  }
  // f32 rows: argmax_f32, vectorized per x86-64 level.
  void run_contiguous(Acc& acc, const float* x, int64_t n, int64_t r0) const {
    const int64_t k = argmax_f32(x, n);
    merge(acc, Acc{x[k], r0 + k});
  }
  // b covers reduced elements after acc's.
  void merge(Acc& acc, const Acc& b) const {
    if (b.i >= 0 && (acc.i < 0 || better(b.v, acc.v))) acc = b;
  }
  void merge_lane(Acc& acc, const Lane& lane) const { merge(acc, lane); }
  void store(int64_t o, const Acc& acc) const {
    if constexpr (kValues) static_cast<T*>(a.values)[o] = T(acc.v);
    a.indices[o] = acc.i;
  }
};

template <typename T, bool kValues>
void max_kernel(const MaxArgs& a) {
  run_reduce(MaxReducer<T, kValues>{a}, a.g);
}

// ---- max backward ----

template <typename T>
void max_backward_loop(const MaxBackwardArgs& a) {
  T* grad_in = static_cast<T*>(a.grad_in);
  const T* grad_out = static_cast<const T*>(a.grad_out);
  parallel_for(a.outer * a.n * a.inner, kGrainElementwise, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) grad_in[i] = T(0.0f);
  });
  parallel_for(a.outer * a.inner, kGrainElementwise, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      const int64_t k = a.indices[j];
      if (k < 0 || k >= a.n) continue;   // max() never makes these; skipped, never written out of bounds
      const int64_t p = j / a.inner, i = j % a.inner;
      grad_in[(p * a.n + k) * a.inner + i] = grad_out[j];
    }
  });
}

// ---- kernel table entries: the runtime mode and dtype picked once per launch ----
// (NOTE [ Specialized kernels ] in src/core/kernel.h: a replay calls the typed entry directly)

// Output dtype: the input's, or the wide one (f32 for floats, i64 for
// integers and bool); the host checked which, and that kMean and
// kSquaredDeviation have float inputs.
template <SumMode kMode, typename T>
void sum_typed(const SumArgs& a) {
  constexpr bool kFloat = std::is_floating_point_v<compute_t<T>>;
  using Wide = std::conditional_t<kFloat, float, int64_t>;
  if constexpr (kFloat || kMode == SumMode::kSum) {
    if (a.out_dtype == a.in_dtype) return sum_kernel<T, T, kMode>(a);
    return sum_kernel<T, Wide, kMode>(a);
  }
}

template <SumMode kMode>
KernelThunk pick_sum_mode(const SumArgs& a) {
  return dispatch_all(a.in_dtype, "sum", [](auto tag) {
    return thunk_of<&sum_typed<kMode, typename decltype(tag)::type>>();
  });
}

KernelThunk pick_sum(const SumArgs& a) {
  switch (a.mode) {
    case SumMode::kSum: return pick_sum_mode<SumMode::kSum>(a);
    case SumMode::kMean: return pick_sum_mode<SumMode::kMean>(a);
    case SumMode::kSquaredDeviation: break;
  }
  return pick_sum_mode<SumMode::kSquaredDeviation>(a);
}

template <typename T>
struct MaxEntry {
  static void run(const MaxArgs& a) {
    if (a.values != nullptr) return max_kernel<T, true>(a);
    return max_kernel<T, false>(a);
  }
};

template <typename T>
struct MaxBackwardEntry {
  static void run(const MaxBackwardArgs& a) {
    max_backward_loop<T>(a);
  }
};

}  // namespace

extern const ReduceKernels kReduce = {
    .sum = specialized_kernel<&pick_sum>(),
    .max = specialized_kernel<&pick_numeric<MaxEntry, MaxArgs>>(),
    .max_backward = specialized_kernel<&pick_float<MaxBackwardEntry, MaxBackwardArgs>>(),
    .plan_sum = nullptr,   // one pass over the geometry, no partials scratch
    .plan_max = nullptr,
};

}  // namespace encore::cpu
