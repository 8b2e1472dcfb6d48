// CUDA reduction kernels: sum, mean, var, max/argmax, and max's backward
// (contracts: SumArgs, MaxArgs, MaxBackwardArgs in src/backends/kernel_table.h;
// host side: src/backends/reduce.cpp). The plan, kernels, then the kernel
// table entries. Deterministic: every shape reduces in one fixed order (NOTE
// [ CUDA reduction plan ]), without atomics. No Abseil and no tensor types
// here: they slow nvcc.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "src/backends/cuda/convert.cuh"
#include "src/backends/cuda/launch.h"
#include "src/backends/kernel_table.h"

namespace encore::cuda {
namespace {

using namespace backend;   // the shared argument structs, kinds and formulas

constexpr int kReduceThreads = 256;      // threads per block of every reduction kernel
constexpr int kReduceMaxSplits = 1024;   // chunks of one output in the two-pass scheme
// Bytes of one partial in SumArgs::partials / MaxArgs::partials.
constexpr int64_t kSumPartialBytes = 8;
constexpr int64_t kMaxPartialBytes = 16;

// ---- plan ----

// NOTE [ CUDA reduction plan ]
// Every block has kReduceThreads = tx * ty threads (both powers of two): tx
// adjacent outputs, ty threads per output that split its reduced elements
// (thread y takes elements y, y + ty, ...; each accumulates in index order)
// and then combine in a fixed shared-memory tree. `row_threads` puts y in the
// fast-varying thread index (rows whose reduced elements are adjacent in
// memory: one block or a few warps per row, coalesced along the row); else x
// is fast (columns: adjacent outputs adjacent in memory; ty = 1 is a thread
// per output). With splits > 1 the reduced range of each output is cut into
// `splits` equal chunks (grid y); pass one writes one partial per chunk into
// a temporary, pass two combines them in chunk order. The plan depends on
// the geometry alone, so a shape always reduces in the same order and
// replays are bit-identical (no atomics anywhere).

int32_t pow2_ceil(int64_t v) {
  int32_t p = 1;
  while (p < v && p < kReduceThreads) p *= 2;
  return p;
}

// Elements each thread takes at least before more threads share an output,
// and (two-pass) the elements per thread that make a chunk worth its own block.
constexpr int64_t kMinPerThread = 4;
constexpr int64_t kChunkPerThread = 32;
// Two-pass when the single pass would have fewer than half this many blocks,
// and then about this many blocks in all (an H100/H200 has 132 SMs).
constexpr int64_t kTargetBlocks = 512;

// NOTE [ CUDA reduction plan ]. Depends on g only.
ReducePlan make_plan(const ReduceGeom& g) {
  const int64_t n = g.red_numel, m = g.out_numel;
  const bool red_contiguous = g.red_stride[g.red_ndim - 1] == 1;
  const bool columns = m > 1 && !red_contiguous && g.kept_stride[g.kept_ndim - 1] == 1;
  ReducePlan p{};
  p.splits = 1;
  p.row_threads = !columns;
  // Columns: at least a warp's worth of adjacent outputs when there are that many.
  p.ty = columns ? kReduceThreads / pow2_ceil(std::min<int64_t>(g.kept_shape[g.kept_ndim - 1], 32))
                 : kReduceThreads;
  while (p.ty > 1 && p.ty * kMinPerThread > n) p.ty /= 2;
  p.tx = kReduceThreads / p.ty;
  const int64_t groups = (m + p.tx - 1) / p.tx;
  if (groups > 0 && groups < kTargetBlocks / 2) {
    const int64_t by_length = (n + p.ty * kChunkPerThread - 1) / (p.ty * kChunkPerThread);
    const int64_t by_blocks = (kTargetBlocks + groups - 1) / groups;
    const int64_t splits = std::min({int64_t{kReduceMaxSplits}, by_length, by_blocks});
    if (splits > 1) p.splits = static_cast<int32_t>(splits);
  }
  return p;
}

// Bytes of the partials of a two-pass plan (0 for one pass), `bytes` per partial.
int64_t partials_bytes(const ReducePlan& p, const ReduceGeom& g, int64_t bytes) {
  if (p.splits == 1 || g.out_numel == 0) return 0;
  return p.splits * g.out_numel * bytes;
}

int64_t plan_sum(SumArgs& a) {
  a.plan = make_plan(a.g);
  return partials_bytes(a.plan, a.g, kSumPartialBytes);
}

int64_t plan_max(MaxArgs& a) {
  a.plan = make_plan(a.g);
  return partials_bytes(a.plan, a.g, kMaxPartialBytes);
}

template <typename C> __device__ __forceinline__ bool is_nan(C v) {
  if constexpr (std::is_floating_point_v<C>) {
    return v != v;
  } else {
    return false;
  }
}

// ---- geometry ----

// Element offset of row-major index i over `ndim` dims of shape / stride.
__device__ __forceinline__ int64_t strided_offset(int64_t i, int ndim, const int64_t* shape, const int64_t* stride) {
  int64_t off = 0;
  for (int d = ndim - 1; d >= 0; --d) {
    off += (i % shape[d]) * stride[d];
    i /= shape[d];
  }
  return off;
}

__device__ __forceinline__ int64_t kept_offset(const ReduceGeom& g, int64_t o) {
  return strided_offset(o, g.kept_ndim, g.kept_shape, g.kept_stride);
}

__device__ __forceinline__ int64_t red_offset(const ReduceGeom& g, int64_t r) {
  return strided_offset(r, g.red_ndim, g.red_shape, g.red_stride);
}

// ---- reducers ----
// A reducer R has: In (element type); Part (a partial result, trivially
// constructible: it lives in shared memory and in the partials buffer);
// State (one thread's running accumulation); start(o), add(state, x, o, r)
// for the reduced elements of output o in increasing r, finish(state) ->
// Part, identity(), merge(a, b) (a fixed, associative combination), and
// store(o, part).

// NOTE [ CUDA summation error ]
// Floats accumulate in f32; each thread sums its elements by Kahan
// summation, so its error is a few ulps of its partial whatever its length,
// and the partials combine in a tree of depth log2(ty) + log2(splits) <= 18
// (plus Kahan over at most 4 partials per thread in the second pass): the
// error stays at most about 20 u sum|x| (u = 2^-24), within NOTE
// [ CUDA tolerances ] of tests/backends/cuda_test_util.h. Integers and bool
// accumulate in wrapping 64-bit unsigned arithmetic, as on the CPU.
template <typename T, typename TOut, SumMode kMode>
struct SumReducer {
  using In = T;
  static constexpr bool kFloat = std::is_floating_point_v<compute_t<T>>;
  using Part = std::conditional_t<kFloat, float, unsigned long long>;
  struct State { Part sum, comp; float mean; };   // comp: Kahan compensation (floats)

  TOut* out;
  const float* mean;
  double divisor;

  __device__ State start(int64_t o) const {
    State s{};
    if constexpr (kMode == SumMode::kSquaredDeviation) s.mean = mean[o];
    return s;
  }
  __device__ static void kahan_add(State& s, float v) {
    const float y = v - s.comp;
    const float t = s.sum + y;
    s.comp = isfinite(t) ? (t - s.sum) - y : 0.0f;   // an inf or NaN sum stays as it is
    s.sum = t;
  }
  __device__ void add(State& s, T x, int64_t, int64_t) const {
    if constexpr (kFloat) {
      float v = to_compute(x);
      if constexpr (kMode == SumMode::kSquaredDeviation) {
        const float d = v - s.mean;
        v = d * d;
      }
      kahan_add(s, v);
    } else {
      s.sum += static_cast<unsigned long long>(static_cast<long long>(x));
    }
  }
  __device__ static Part finish(const State& s) {
    if constexpr (kFloat) {
      return s.sum - s.comp;
    } else {
      return s.sum;
    }
  }
  __device__ static Part identity() { return Part(0); }
  __device__ static Part merge(Part a, Part b) { return a + b; }
  __device__ void store(int64_t o, Part p) const {
    if constexpr (!kFloat) {
      out[o] = static_cast<TOut>(static_cast<long long>(p));
    } else if constexpr (kMode == SumMode::kSum) {
      out[o] = convert<TOut>(p);
    } else {
      out[o] = convert<TOut>(static_cast<float>(static_cast<double>(p) / divisor));
    }
  }
};

// Max and the row-major index of its first occurrence; a NaN beats any number
// and the first NaN wins (as on the CPU).
template <typename T>
struct MaxReducer {
  using In = T;
  using C = compute_t<T>;
  struct Part { C v; long long i; };   // i < 0: nothing seen yet
  using State = Part;

  T* values;          // null for argmax
  int64_t* indices;

  __device__ State start(int64_t) const { return identity(); }
  __device__ static Part identity() { return Part{C(0), -1}; }
  // Elements arrive in increasing r: strictly better keeps the first of equals.
  __device__ void add(State& s, T x, int64_t, int64_t r) const {
    const C v = to_compute(x);
    if (s.i < 0 || v > s.v || (is_nan(v) && !is_nan(s.v))) s = Part{v, r};
  }
  __device__ static Part finish(const State& s) { return s; }
  // Order-free: the larger value wins (a NaN is the largest), equal values
  // (or two NaNs) go to the smaller index.
  __device__ static Part merge(const Part& a, const Part& b) {
    if (b.i < 0) return a;
    if (a.i < 0) return b;
    const bool an = is_nan(a.v), bn = is_nan(b.v);
    if (an || bn) return (an && bn) ? (b.i < a.i ? b : a) : (bn ? b : a);
    if (b.v > a.v) return b;
    if (a.v > b.v) return a;
    return b.i < a.i ? b : a;
  }
  __device__ void store(int64_t o, const Part& p) const {
    if (values != nullptr) {
      if constexpr (std::is_integral_v<T>) {
        values[o] = p.v;   // through float would round large integers
      } else {
        values[o] = convert<T>(p.v);
      }
    }
    indices[o] = p.i;
  }
};

// ---- kernels ----

// Combines sh[y * tx + x] over y (ty a power of two) into sh[x], in a fixed
// tree. Every thread of the block must call it.
template <typename R>
__device__ __forceinline__ void block_tree(typename R::Part* sh, int x, int y, int tx, int ty) {
  __syncthreads();
  for (int h = ty / 2; h > 0; h /= 2) {
    if (y < h) sh[y * tx + x] = R::merge(sh[y * tx + x], sh[(y + h) * tx + x]);
    __syncthreads();
  }
}

// Pass one (or the only pass): block (grid-stride over groups of tx outputs,
// blockIdx.y = chunk) as NOTE [ CUDA reduction plan ] describes.
template <typename R>
__global__ void __launch_bounds__(kReduceThreads)
    reduce_kernel(R r, const ReduceGeom g, const ReducePlan p, typename R::Part* partials) {
  kernel_prologue();
  using Part = typename R::Part;
  __shared__ Part sh[kReduceThreads];
  const int t = threadIdx.x;
  const int x = p.row_threads ? t / p.ty : t % p.tx;
  const int y = p.row_threads ? t % p.ty : t / p.tx;
  const int64_t m = g.out_numel, n = g.red_numel;
  const int64_t chunk = blockIdx.y;
  const int64_t begin = chunk * n / p.splits, end = (chunk + 1) * n / p.splits;
  const int64_t groups = (m + p.tx - 1) / p.tx;
  const auto* in = static_cast<const typename R::In*>(g.in);
  for (int64_t grp = blockIdx.x; grp < groups; grp += gridDim.x) {
    const int64_t o = grp * p.tx + x;
    Part part = R::identity();
    if (o < m) {
      const typename R::In* base = in + kept_offset(g, o);
      typename R::State s = r.start(o);
      if (g.red_ndim == 1) {
        const int64_t stride = g.red_stride[0];
        for (int64_t i = begin + y; i < end; i += p.ty) r.add(s, base[i * stride], o, i);
      } else {
        for (int64_t i = begin + y; i < end; i += p.ty) r.add(s, base[red_offset(g, i)], o, i);
      }
      part = R::finish(s);
    }
    if (p.ty > 1) {
      sh[y * p.tx + x] = part;
      block_tree<R>(sh, x, y, p.tx, p.ty);
      if (y == 0) part = sh[x];   // row 0: written and read by thread (0, x) only after the tree
    }
    if (y == 0 && o < m) {
      if (p.splits == 1) {
        r.store(o, part);
      } else {
        partials[chunk * m + o] = part;
      }
    }
  }
}

// Pass two: one block per output (grid-stride) combines its `splits`
// partials (chunk order within each thread, then the tree).
template <typename R>
__global__ void __launch_bounds__(kReduceThreads)
    combine_kernel(R r, const typename R::Part* partials, int64_t m, int32_t splits) {
  kernel_prologue();
  using Part = typename R::Part;
  __shared__ Part sh[kReduceThreads];
  const int y = threadIdx.x;
  for (int64_t o = blockIdx.x; o < m; o += gridDim.x) {
    Part part = R::identity();
    for (int64_t c = y; c < splits; c += kReduceThreads) part = R::merge(part, partials[c * m + o]);
    sh[y] = part;
    block_tree<R>(sh, 0, y, 1, kReduceThreads);
    if (y == 0) r.store(o, sh[0]);
    __syncthreads();   // sh[0] is read before the next output overwrites it
  }
}

// grad_in[p, k, i] = indices[p, i] == k ? grad_out[p, i] : 0: one pass, no
// scatter, so no races and no separate zero fill.
template <typename T>
__global__ void max_backward_kernel(T* grad_in, const T* grad_out, const int64_t* indices, int64_t outer, int64_t n,
                                    int64_t inner) {
  kernel_prologue();
  const int64_t total = outer * n * inner;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e % inner, rest = e / inner;
    const int64_t k = rest % n, p = rest / n;
    const int64_t j = p * inner + i;
    grad_in[e] = indices[j] == k ? grad_out[j] : convert<T>(0.0f);
  }
}

// ---- launch helpers ----

template <typename R>
void launch_reduce(const R& r, const ReduceGeom& g, const ReducePlan& p, void* partials, const char* op) {
  const int64_t m = g.out_numel;
  if (m == 0) return;
  using Part = typename R::Part;
  const int64_t groups = (m + p.tx - 1) / p.tx;
  const dim3 grid(blocks_for(groups, 1), static_cast<unsigned>(p.splits));
  auto* part = static_cast<Part*>(partials);
  launch_kernel(reduce_kernel<R>, grid, kReduceThreads, 0, active_stream(), r, g, p, part);
  check_launch(op);
  if (p.splits > 1) {
    launch_kernel(combine_kernel<R>, blocks_for(m, 1), kReduceThreads, 0, active_stream(), r, part, m, p.splits);
    check_launch(op);
  }
}

constexpr const char* kSumNames[] = {"sum", "mean", "var"};   // by SumMode

template <typename T, typename TOut, SumMode kMode>
void launch_sum_typed(const SumArgs& a) {
  static_assert(sizeof(typename SumReducer<T, TOut, kMode>::Part) <= kSumPartialBytes);
  launch_reduce(SumReducer<T, TOut, kMode>{static_cast<TOut*>(a.out), a.mean, a.divisor}, a.g, a.plan, a.partials,
                kSumNames[static_cast<int>(kMode)]);
}

template <typename T, SumMode kMode>
void launch_sum_out(const SumArgs& a) {
  using Wide = std::conditional_t<std::is_floating_point_v<compute_t<T>>, float, int64_t>;
  if (a.out_dtype == a.in_dtype) return launch_sum_typed<T, T, kMode>(a);
  return launch_sum_typed<T, Wide, kMode>(a);   // the host checked out_dtype is the wide type
}

template <SumMode kMode>
void launch_sum_mode(const SumArgs& a) {
  switch (a.in_dtype) {
    case DType::kFloat32: return launch_sum_out<float, kMode>(a);
    case DType::kFloat16: return launch_sum_out<__half, kMode>(a);
    case DType::kBFloat16: return launch_sum_out<__nv_bfloat16, kMode>(a);
    default: break;
  }
  if constexpr (kMode == SumMode::kSum) {   // mean and var take floats only (the host checks)
    switch (a.in_dtype) {
      case DType::kInt32: return launch_sum_out<int32_t, kMode>(a);
      case DType::kInt64: return launch_sum_out<int64_t, kMode>(a);
      case DType::kBool: return launch_sum_out<bool, kMode>(a);
      default: break;
    }
  }
}

template <typename T>
void launch_max_typed(const MaxArgs& a) {
  static_assert(sizeof(typename MaxReducer<T>::Part) <= kMaxPartialBytes);
  launch_reduce(MaxReducer<T>{static_cast<T*>(a.values), a.indices}, a.g, a.plan, a.partials,
                a.values != nullptr ? "max" : "argmax");
}

template <typename T>
void launch_max_backward_typed(const MaxBackwardArgs& a) {
  const int64_t total = a.outer * a.n * a.inner;
  if (total == 0) return;
  launch_kernel(max_backward_kernel<T>, blocks_for(total), kThreads, 0, active_stream(),
      static_cast<T*>(a.grad_in), static_cast<const T*>(a.grad_out), a.indices, a.outer, a.n, a.inner);
  check_launch("max_backward");
}

// ---- kernel table entries ----

void sum_launcher(const SumArgs& a) {
  switch (a.mode) {
    case SumMode::kSum: return launch_sum_mode<SumMode::kSum>(a);
    case SumMode::kMean: return launch_sum_mode<SumMode::kMean>(a);
    case SumMode::kSquaredDeviation: return launch_sum_mode<SumMode::kSquaredDeviation>(a);
  }
}

void max_launcher(const MaxArgs& a) {
  switch (a.dtype) {
    case DType::kFloat32: return launch_max_typed<float>(a);
    case DType::kFloat16: return launch_max_typed<__half>(a);
    case DType::kBFloat16: return launch_max_typed<__nv_bfloat16>(a);
    case DType::kInt32: return launch_max_typed<int32_t>(a);
    case DType::kInt64: return launch_max_typed<int64_t>(a);
    case DType::kBool: break;   // refused on the host
  }
}

void max_backward_launcher(const MaxBackwardArgs& a) {
  switch (a.dtype) {
    case DType::kFloat32: return launch_max_backward_typed<float>(a);
    case DType::kFloat16: return launch_max_backward_typed<__half>(a);
    case DType::kBFloat16: return launch_max_backward_typed<__nv_bfloat16>(a);
    default: break;   // refused on the host
  }
}

}  // namespace

extern const ReduceKernels kReduce = {
    .sum = kernel<&sum_launcher>(),
    .max = kernel<&max_launcher>(),
    .max_backward = kernel<&max_backward_launcher>(),
    .plan_sum = &plan_sum,
    .plan_max = &plan_max,
};

}  // namespace encore::cuda
