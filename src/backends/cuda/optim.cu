// The CUDA kernels of the optimizers (contracts: kernels.h, "optim";
// argument structs: kernel_table.h). Kernels, then launchers, which are the
// entries of the CUDA kernel table.
//
// NOTE [ CUDA AdamW bits ]: the SGD and AdamW elements are the CPU's own
// source (src/backends/optim_math.h), whose f32 operations are explicitly
// rounded intrinsics on the device (__fmul_rn, __fadd_rn, __fdiv_rn,
// __fsqrt_rn: never contracted into FMAs, whatever --fmad says), and the
// per-step constants are computed in double like the CPU's. So a CUDA AdamW
// or SGD step gives the CPU's bits for the same inputs.
#include "src/backends/cuda/elementwise.cuh"
#include "src/backends/kernel_table.h"
#include "src/backends/optim_math.h"

namespace encore::cuda {
namespace {

using namespace backend;   // the shared argument structs, kinds and formulas

// ---- SGD ----

template <typename T>
__global__ void __launch_bounds__(kThreads) sgd_kernel(SgdArgs a) {
  kernel_prologue();
  const float lr = *a.lr, mu = a.momentum, wd = a.weight_decay;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.l.numel; i += stride) {
    char* p[3];
    element_ptrs(a.l, i, p);
    const float param = to_float(*reinterpret_cast<const T*>(p[0]));
    const float d = backend::sgd_direction(param, to_float(*reinterpret_cast<const T*>(p[1])), wd);
    const float update =
        a.has_momentum ? backend::sgd_momentum(d, *reinterpret_cast<float*>(p[2]), mu, a.nesterov) : d;
    store<T>(p[0], backend::sgd_apply(param, lr, update));
  }
}

// ---- AdamW ----

template <typename A>   // AdamWArgs or AdamWManyArgs
__device__ AdamWCoefs adamw_coefs(const A& a) {
  return backend::adamw_coefs(*a.lr, *a.step, a.beta1, a.beta2, a.eps, a.weight_decay);
}

// One element of NOTE [ AdamW arithmetic ]: p of storage type T, rounded once on store.
template <typename T>
__device__ __forceinline__ void adamw_element(const AdamWCoefs& c, T* p, const T* g, float* m, float* v) {
  float x = to_float(*p);
  backend::adamw_element(c, x, to_float(*g), *m, *v);
  store<T>(reinterpret_cast<char*>(p), x);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) adamw_kernel(AdamWArgs a) {
  kernel_prologue();
  __shared__ AdamWCoefs c;   // one thread per block derives the per-step constants
  if (threadIdx.x == 0) c = adamw_coefs(a);
  __syncthreads();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.l.numel; i += stride) {
    char* p[4];
    element_ptrs(a.l, i, p);
    adamw_element<T>(c, reinterpret_cast<T*>(p[0]), reinterpret_cast<const T*>(p[1]), reinterpret_cast<float*>(p[2]),
                     reinterpret_cast<float*>(p[3]));
  }
}

constexpr int64_t kManyChunk = 4 * kThreads;   // concatenated elements per block and pass

// Block b takes chunks b, b + gridDim.x, ... of the concatenated elements;
// each thread walks its elements in increasing order, so the row it is in
// only moves forward.
template <typename T>
__global__ void __launch_bounds__(kThreads) adamw_many_kernel(AdamWManyArgs a) {
  kernel_prologue();
  __shared__ AdamWCoefs c;
  if (threadIdx.x == 0) c = adamw_coefs(a);
  __syncthreads();
  for (int64_t lo = static_cast<int64_t>(blockIdx.x) * kManyChunk; lo < a.total;
       lo += static_cast<int64_t>(gridDim.x) * kManyChunk) {
    // The row holding element lo: the last one whose start is <= lo.
    int64_t left = 0, right = a.count - 1;
    while (left < right) {
      const int64_t mid = (left + right + 1) / 2;
      if (a.table[mid].start <= lo) left = mid; else right = mid - 1;
    }
    int64_t k = left;
    const int64_t hi = lo + kManyChunk < a.total ? lo + kManyChunk : a.total;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
      while (i >= a.table[k].start + a.table[k].numel) ++k;   // skips empty rows too
      const AdamWEntry& e = a.table[k];
      const int64_t j = i - e.start;
      adamw_element<T>(c, reinterpret_cast<T*>(e.p) + j, reinterpret_cast<const T*>(e.g) + j, e.m + j, e.v + j);
    }
  }
}

// ---- step counter ----

__global__ void increment_kernel(int64_t* counter) {
  kernel_prologue();
  *counter += 1;
}

// ---- gradient-norm clipping ----

constexpr int kMaxSumBlocks = 256;

// Pass 1: block b sums x^2 over a fixed grid-stride subset, then a fixed
// shared-memory tree: the order depends only on n and the block count.
template <typename T>
__global__ void __launch_bounds__(kThreads) sum_squares_partial_kernel(backend::Layout<1> l, double* scratch) {
  kernel_prologue();
  __shared__ double lanes[kThreads];
  double s = 0.0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < l.numel; i += stride) {
    char* p[1];
    element_ptrs(l, i, p);
    const double x = to_float(*reinterpret_cast<const T*>(p[0]));
    s += x * x;
  }
  lanes[threadIdx.x] = s;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) lanes[threadIdx.x] += lanes[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) scratch[blockIdx.x] = lanes[0];
}

__global__ void sum_squares_final_kernel(const double* scratch, int blocks, float* out) {
  kernel_prologue();
  double total = 0.0;
  for (int b = 0; b < blocks; ++b) total += scratch[b];
  *out = static_cast<float>(sqrt(total));   // the root fits f32 where the sum may not
}

__global__ void clip_coefficient_kernel(ClipCoefArgs a) {
  kernel_prologue();
  double total = 0.0;
  for (int64_t i = 0; i < a.n; ++i) total += static_cast<double>(a.partial[i]) * a.partial[i];
  const double norm = sqrt(total);
  *a.norm = static_cast<float>(norm);
  const double coef = a.max_norm / (norm + 1e-6);   // PyTorch's epsilon; NaN stays NaN
  *a.scale = static_cast<float>((coef < 1.0 || isnan(coef)) ? coef : 1.0);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) scale_kernel(ScaleInPlaceArgs a) {
  kernel_prologue();
  const float s = *a.scale;
  if (!(s < 1.0f)) return;   // 1 (below max_norm) or NaN: leave the values as they are
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.l.numel; i += stride) {
    char* p[1];
    element_ptrs(a.l, i, p);
    store<T>(p[0], __fmul_rn(to_float(*reinterpret_cast<const T*>(p[0])), s));
  }
}

// Calls f(Tag<T>{}) for the float storage types.
template <typename F>
void visit_float(DType t, F&& f) {
  switch (t) {
    case DType::kFloat16: return f(Tag<__half>{});
    case DType::kBFloat16: return f(Tag<__nv_bfloat16>{});
    default: return f(Tag<float>{});   // the host checked: f32
  }
}

// ---- launchers: the kernel table's entries ----

void sgd_launch(const SgdArgs& a) {
  if (a.l.numel <= 0) return;
  visit_float(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_kernel(sgd_kernel<T>, blocks_for(a.l.numel), kThreads, 0, active_stream(), a);
  });
  check_launch("sgd");
}

void adamw_launch(const AdamWArgs& a) {
  if (a.l.numel <= 0) return;
  visit_float(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_kernel(adamw_kernel<T>, blocks_for(a.l.numel), kThreads, 0, active_stream(), a);
  });
  check_launch("adamw");
}

void adamw_many_launch(const AdamWManyArgs& a) {
  if (a.total <= 0 || a.count <= 0) return;
  const int64_t chunks = (a.total + kManyChunk - 1) / kManyChunk;
  const unsigned blocks = static_cast<unsigned>(chunks < 65535 * 8 ? chunks : 65535 * 8);
  visit_float(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_kernel(adamw_many_kernel<T>, blocks, kThreads, 0, active_stream(), a);
  });
  check_launch("adamw");
}

void increment_launch(const IncrementArgs& a) {
  launch_kernel(increment_kernel, 1, 1, 0, active_stream(), a.counter);
  check_launch("increment");
}

// Pass-1 blocks (partial sums) for n elements: about 8 elements per thread, at most kMaxSumBlocks.
int sum_of_squares_blocks(int64_t n) {
  const int64_t b = (n + kThreads * 8 - 1) / (kThreads * 8);
  return static_cast<int>(b < 1 ? 1 : (b > kMaxSumBlocks ? kMaxSumBlocks : b));
}

void sum_of_squares_launch(const SumSquaresArgs& a) {
  visit_float(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_kernel(sum_squares_partial_kernel<T>, a.blocks, kThreads, 0, active_stream(), a.l, a.scratch);
  });
  check_launch("sum_of_squares");
  launch_kernel(sum_squares_final_kernel, 1, 1, 0, active_stream(), a.scratch, a.blocks, a.out);
  check_launch("sum_of_squares");
}

void clip_coefficient_launch(const ClipCoefArgs& a) {
  launch_kernel(clip_coefficient_kernel, 1, 1, 0, active_stream(), a);
  check_launch("clip_coefficient");
}

void scale_in_place_launch(const ScaleInPlaceArgs& a) {
  if (a.l.numel <= 0) return;
  visit_float(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_kernel(scale_kernel<T>, blocks_for(a.l.numel), kThreads, 0, active_stream(), a);
  });
  check_launch("scale_in_place");
}

}  // namespace

extern const OptimKernels kOptim = {
    .sgd = kernel<&sgd_launch>(),
    .adamw = kernel<&adamw_launch>(),
    .adamw_many = kernel<&adamw_many_launch>(),
    .increment = kernel<&increment_launch>(),
    .sum_of_squares_blocks = &sum_of_squares_blocks,   // two passes: per-block doubles, then their sum
    .sum_of_squares = kernel<&sum_of_squares_launch>(),
    .clip_coefficient = kernel<&clip_coefficient_launch>(),
    .scale_in_place = kernel<&scale_in_place_launch>(),
};

}  // namespace encore::cuda
