#include "src/backends/cpu/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "src/backends/cpu/dispatch.h"
#include "src/backends/cpu/parallel.h"
#include "src/backends/tensor_layout.h"
#include "src/core/stream.h"

namespace encore::cpu {
namespace {

// ---- geometry ----

// The loop a reduction runs, chosen on the host from the merged geometry.
enum class ReduceKind : int32_t {
  kFull,     // one output: the reduced range splits into blocks whose partials combine in order
  kRows,     // outputs in parallel, each over its reduced elements in runs along the innermost reduced dim
  kColumns,  // innermost kept dim has stride 1: a block of adjacent outputs advances together (vectorizes)
};

// NOTE [ Reduction geometry ]
// The input seen as kept dims x reduced dims, as if permuted so the reduced
// dims come last. Size-1 dims are dropped and a dim merges into the previous
// one of its group when their strides allow, so reducing the last dim of a
// contiguous tensor is one reduced dim of stride 1, and a full reduction of a
// contiguous tensor one reduced dim of numel. Merging keeps row-major order,
// so the linear index over the reduced dims is the index max() reports.
// Output o is the o-th kept index in row-major order (the output is contiguous).
struct ReduceGeom {
  const void* in;                    // the input's first element
  ReduceKind kind;
  int32_t kept_ndim, red_ndim;       // both >= 1 (a size-1 dim stands in for none)
  int64_t out_numel, red_numel;      // elements; red_numel per output
  int64_t kept_shape[kMaxDims], kept_stride[kMaxDims];   // strides in input elements
  int64_t red_shape[kMaxDims], red_stride[kMaxDims];
};

inline constexpr int64_t kPairwiseBlock = 256;   // elements summed by 8 lanes before the pairwise tree
// Adjacent outputs updated together in the column loop: 1024 f32 is a 4 KiB
// page per reduced element, which keeps the hardware prefetcher streaming
// (256 measured 3x slower on a [4096, 4096] -> [4096] sum).
inline constexpr int64_t kColumnBlock = 1024;
inline constexpr int64_t kColumnRows = 256;      // reduced elements per column lane before it folds
inline constexpr int64_t kMaxBlocks = 64;        // blocks of a full reduction (partials live on the stack)

ReduceGeom make_geom(const char* op, const Tensor& a, DimMask dims) {
  ReduceGeom g{};
  backend::group_reduce_dims(op, a, dims, g);
  if (g.out_numel == 1) {
    g.kind = ReduceKind::kFull;
  } else if (g.red_stride[g.red_ndim - 1] != 1 && g.kept_stride[g.kept_ndim - 1] == 1) {
    g.kind = ReduceKind::kColumns;
  } else {
    g.kind = ReduceKind::kRows;
  }
  return g;
}

// Input offset (elements) of output o's first reduced element.
inline int64_t kept_offset(const ReduceGeom& g, int64_t o) {
  int64_t off = 0;
  for (int d = g.kept_ndim - 1; d >= 0; --d) {
    off += (o % g.kept_shape[d]) * g.kept_stride[d];
    o /= g.kept_shape[d];
  }
  return off;
}

// ---- reduction drivers (R: a reducer, see SumReducer and MaxReducer) ----

// Accumulates the reduced elements [begin, end) (row-major over the reduced
// dims) of output o, whose first element is x, in runs along the innermost
// reduced dim. Needs red_numel > 0.
template <typename R>
void reduce_range(const R& r, const ReduceGeom& g, const typename R::In* x, int64_t o, int64_t begin, int64_t end,
                  typename R::Acc& acc) {
  const int inner = g.red_ndim - 1;
  int64_t idx[kMaxDims];
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
  typename R::Acc acc[kColumnBlock];
  typename R::Lane lane[kColumnBlock];
  for (int64_t c = 0; c < w; ++c) acc[c] = typename R::Acc{};
  int64_t idx[kMaxDims] = {};
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
  switch (g.kind) {
    case ReduceKind::kFull: return run_full(r, g);
    case ReduceKind::kRows: return run_rows(r, g);
    case ReduceKind::kColumns: return run_columns(r, g);
  }
}

// ---- sum, mean, var ----

enum class SumMode { kSum, kMean, kSquaredDeviation };

struct SumArgs {
  ReduceGeom g;
  void* out;            // contiguous, g.out_numel elements
  const float* mean;    // kSquaredDeviation: the mean of each output (f32)
  double divisor;       // kMean: count; kSquaredDeviation: max(0, count - correction)
};

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

struct MaxArgs {
  ReduceGeom g;
  void* values;         // contiguous, a's dtype; unused for argmax
  int64_t* indices;     // contiguous i64
};

template <typename T, bool kValues>
struct MaxReducer {
  using In = T;
  using C = compute_t<T>;
  struct Acc { C v{}; int64_t i = -1; };   // i < 0: nothing seen yet
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
  // f32 rows: the max and whether a NaN occurs, by 8 independent lanes (vectorizes),
  // then a scan for the first element equal to it (or the first NaN).
  void run_contiguous(Acc& acc, const float* x, int64_t n, int64_t r0) const {
    float lane[8];
    int32_t nan[8] = {};
    for (int j = 0; j < 8; ++j) lane[j] = -std::numeric_limits<float>::infinity();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      for (int j = 0; j < 8; ++j) {
        lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
        nan[j] |= x[i + j] != x[i + j];
      }
    }
    float best = lane[0];
    bool any_nan = nan[0] != 0;
    for (int j = 1; j < 8; ++j) {
      best = lane[j] > best ? lane[j] : best;
      any_nan = any_nan || nan[j] != 0;
    }
    for (; i < n; ++i) {
      best = x[i] > best ? x[i] : best;
      any_nan = any_nan || x[i] != x[i];
    }
    int64_t k = 0;
    while (k < n - 1 && (any_nan ? !std::isnan(x[k]) : x[k] != best)) ++k;
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
struct MaxBackwardArgs {
  T* grad_in;               // contiguous [outer, n, inner]
  const T* grad_out;        // contiguous [outer, inner]
  const int64_t* indices;   // contiguous [outer, inner]
  int64_t outer, n, inner;
};

template <typename T>
void max_backward_kernel(const MaxBackwardArgs<T>& a) {
  parallel_for(a.outer * a.n * a.inner, kGrainElementwise, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) a.grad_in[i] = T(0.0f);
  });
  parallel_for(a.outer * a.inner, kGrainElementwise, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      const int64_t k = a.indices[j];
      if (k < 0 || k >= a.n) continue;   // max() never makes these; skipped, never written out of bounds
      const int64_t p = j / a.inner, i = j % a.inner;
      a.grad_in[(p * a.n + k) * a.inner + i] = a.grad_out[j];
    }
  });
}

// ---- launch helpers ----

void check_output(const char* op, const Tensor& out, const ReduceGeom& g, const Tensor& a) {
  ENCORE_CHECK(out.is_contiguous() && out.numel() == g.out_numel,
               "%s: internal: output %s must be contiguous with %d elements for input %s", op,
               shape_str(out.shape()), g.out_numel, shape_str(a.shape()));
}

template <typename T, typename TOut, SumMode kMode>
void launch_sum_typed(const char* op, const Tensor& out, const Tensor& a, const SumArgs& args, const Tensor* mean) {
  if (mean != nullptr) {
    current_stream(kCPU).launch<&sum_kernel<T, TOut, kMode>>(op, args, {a.storage(), mean->storage()},
                                                             {out.storage()});
  } else {
    current_stream(kCPU).launch<&sum_kernel<T, TOut, kMode>>(op, args, {a.storage()}, {out.storage()});
  }
}

// Output dtype: a's, or the wide one (f32 for floats, i64 for integers and bool).
template <SumMode kMode>
void launch_sum(const char* op, const Tensor& out, const Tensor& a, DimMask dims, double divisor,
                const Tensor* mean) {
  SumArgs args{make_geom(op, a, dims), out.data_ptr(), mean ? mean->data<float>() : nullptr, divisor};
  check_output(op, out, args.g, a);
  if (kMode == SumMode::kMean) args.divisor = static_cast<double>(args.g.red_numel);
  if (kMode == SumMode::kSquaredDeviation) {
    args.divisor = std::max<double>(0.0, static_cast<double>(args.g.red_numel) - divisor);
  }
  dispatch_all(a.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr bool kFloat = std::is_floating_point_v<compute_t<T>>;
    using Wide = std::conditional_t<kFloat, float, int64_t>;
    if constexpr (kFloat || kMode == SumMode::kSum) {
      if (out.dtype() == a.dtype()) return launch_sum_typed<T, T, kMode>(op, out, a, args, mean);
      ENCORE_CHECK(out.dtype() == dtype_of<Wide>, "%s: internal: output dtype %s for input %s %s", op,
                   dtype_name(out.dtype()), shape_str(a.shape()), dtype_name(a.dtype()));
      return launch_sum_typed<T, Wide, kMode>(op, out, a, args, mean);
    } else {
      throw_error(absl::StatusCode::kInvalidArgument,
                  absl::StrFormat("%s: needs a float tensor (f32, f16, bf16), got %s %s", op, shape_str(a.shape()),
                                  dtype_name(a.dtype())));
    }
  });
}

}  // namespace

// ---- launchers ----

void sum(const Tensor& out, const Tensor& a, DimMask dims) {
  launch_sum<SumMode::kSum>("sum", out, a, dims, 1.0, nullptr);
}

void mean(const Tensor& out, const Tensor& a, DimMask dims) {
  launch_sum<SumMode::kMean>("mean", out, a, dims, 1.0, nullptr);
}

void var(const Tensor& out, const Tensor& a, const Tensor& mean, DimMask dims, int64_t correction) {
  ENCORE_CHECK(mean.dtype() == kFloat32 && mean.is_contiguous() && mean.numel() == out.numel(),
               "var: internal: mean %s %s does not match output %s", shape_str(mean.shape()),
               dtype_name(mean.dtype()), shape_str(out.shape()));
  launch_sum<SumMode::kSquaredDeviation>("var", out, a, dims, static_cast<double>(correction), &mean);
}

void max(const Tensor& values, const Tensor& indices, const Tensor& a, DimMask dims) {
  const char* op = values.defined() ? "max" : "argmax";
  MaxArgs args{make_geom(op, a, dims), values.defined() ? values.data_ptr() : nullptr, indices.data<int64_t>()};
  check_output(op, indices, args.g, a);
  if (values.defined()) check_output(op, values, args.g, a);
  dispatch_numeric(a.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (values.defined()) {
      current_stream(kCPU).launch<&max_kernel<T, true>>(op, args, {a.storage()},
                                                        {values.storage(), indices.storage()});
    } else {
      current_stream(kCPU).launch<&max_kernel<T, false>>(op, args, {a.storage()}, {indices.storage()});
    }
  });
}

void max_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& indices, int64_t outer, int64_t n,
                  int64_t inner) {
  ENCORE_CHECK(grad_in.is_contiguous() && grad_out.is_contiguous() && indices.is_contiguous() &&
                   grad_in.numel() == outer * n * inner && grad_out.numel() == outer * inner &&
                   indices.numel() == outer * inner && grad_in.dtype() == grad_out.dtype(),
               "max_backward: internal: gradient %s, output gradient %s and indices %s do not fit [%d, %d, %d]",
               shape_str(grad_in.shape()), shape_str(grad_out.shape()), shape_str(indices.shape()), outer, n, inner);
  dispatch_float(grad_in.dtype(), "max_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    MaxBackwardArgs<T> args{grad_in.data<T>(), grad_out.data<T>(), indices.data<int64_t>(), outer, n, inner};
    current_stream(kCPU).launch<&max_backward_kernel<T>>("max_backward", args,
                                                         {grad_out.storage(), indices.storage()},
                                                         {grad_in.storage()});
  });
}

}  // namespace encore::cpu
