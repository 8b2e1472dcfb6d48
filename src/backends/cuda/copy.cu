// CUDA kernels that create and move data: fill, strided copy with dtype
// conversion, arange and Philox random draws (contracts: FillArgs, CopyArgs,
// ArangeArgs, RandomArgs in src/backends/kernel_table.h). Kernels, then
// launchers. Conversions round exactly like backend::convert (convert.cuh),
// and draws use the CPU's Philox (src/core/philox.h), so the same seed gives
// the same numbers on both backends (uniform bit for bit; normal to CUDA's
// logf/cosf accuracy, a few ulps).
#include <type_traits>

#include "src/backends/convert.h"
#include "src/backends/cuda/elementwise.cuh"
#include "src/backends/kernel_table.h"
#include "src/core/philox.h"

namespace encore::cuda {
namespace {

using namespace backend;   // the shared argument structs, kinds and formulas

// ---- kernels ----

template <typename T>
struct FillFn {   // operand out
  T value;
  __device__ void operator()(char* const* p) const { *reinterpret_cast<T*>(p[0]) = value; }
};

template <typename To, typename From>
struct CopyFn {   // operands dst, src
  __device__ void operator()(char* const* p) const {
    *reinterpret_cast<To*>(p[0]) = convert<To>(*reinterpret_cast<const From*>(p[1]));
  }
};

template <typename T>
__global__ void __launch_bounds__(kThreads) arange_kernel(T* out, int64_t n, int64_t start, int64_t step) {
  kernel_prologue();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    // In uint64, as the CPU (cpu/copy.cpp): exact, and step * i may wrap where the value does not.
    const int64_t v = static_cast<int64_t>(static_cast<uint64_t>(start) +
                                           static_cast<uint64_t>(step) * static_cast<uint64_t>(i));
    out[i] = convert<T>(v);
  }
}

// The largest value of T below 1 (as a float): a rounded uniform draw stays in [0, 1).
template <typename T> inline constexpr float kBelowOne = 0.99999994f;                   // 1 - 2^-24
template <> inline constexpr float kBelowOne<__half> = 0.99951171875f;                   // 1 - 2^-11
template <> inline constexpr float kBelowOne<__nv_bfloat16> = 0.99609375f;               // 1 - 2^-8

// Draw i uses the Philox block at counter offset + i (as on the CPU).
template <typename T, RandomKind kKind>
__global__ void __launch_bounds__(kThreads) random_kernel(T* out, int64_t n, const int64_t* state) {
  kernel_prologue();
  const uint64_t seed = static_cast<uint64_t>(state[0]);
  const uint64_t offset = static_cast<uint64_t>(state[1]);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const philox::Block r = philox::philox4x32(offset + static_cast<uint64_t>(i), seed);
    if constexpr (kKind == RandomKind::kUniform) {
      out[i] = convert<T>(fminf(philox::uniform(r.x[0]), kBelowOne<T>));
    } else {
      out[i] = convert<T>(philox::normal(r.x[0], r.x[1]));
    }
  }
}

// Runs after random_kernel on the same stream, so no draw reads the new offset.
__global__ void advance_offset_kernel(int64_t* state, int64_t n) {
  kernel_prologue();
  state[1] = static_cast<int64_t>(static_cast<uint64_t>(state[1]) + static_cast<uint64_t>(n));
}

// ---- launchers ----

void fill_launch(const FillArgs& a) {
  visit_dtype(a.dtype, [&](auto tag) {
    using T = Bits<typename decltype(tag)::type>;
    launch_elementwise(a.l, FillFn<T>{backend::from_bits<T>(a.value_bits)}, "fill");
  });
}

void copy_launch(const CopyArgs& a) {
  if (a.l.numel <= 0) return;
  if (a.dst_dtype == a.src_dtype && a.l.contiguous) {   // dense, same dtype: a plain device copy
    const int64_t nbytes = a.l.numel * dtype_size(a.dst_dtype);
    check(cudaMemcpyAsync(a.l.ptr[0], a.l.ptr[1], nbytes, cudaMemcpyDeviceToDevice, active_stream()), "copy");
    return;
  }
  visit_dtype(a.dst_dtype, [&](auto to) {
    visit_dtype(a.src_dtype, [&](auto from) {
      using To = typename decltype(to)::type;
      using From = typename decltype(from)::type;
      if constexpr (std::is_same_v<To, From>) {
        launch_elementwise(a.l, CopyFn<Bits<To>, Bits<From>>{}, "copy");
      } else {
        launch_elementwise(a.l, CopyFn<To, From>{}, "copy");
      }
    });
  });
}

void arange_launch(const ArangeArgs& a) {
  if (a.n <= 0) return;
  visit_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      launch_kernel(arange_kernel<T>, blocks_for(a.n), kThreads, 0, active_stream(), static_cast<T*>(a.out), a.n,
                    a.start, a.step);
      check_launch("arange");
    }
  });
}

void random_launch(const RandomArgs& a) {
  if (a.n <= 0) return;
  visit_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_half_v<T> || std::is_same_v<T, float>) {
      const cudaStream_t s = active_stream();
      T* out = static_cast<T*>(a.out);
      if (a.kind == RandomKind::kUniform) {
        launch_kernel(random_kernel<T, RandomKind::kUniform>, blocks_for(a.n), kThreads, 0, s, out, a.n, a.state);
      } else {
        launch_kernel(random_kernel<T, RandomKind::kNormal>, blocks_for(a.n), kThreads, 0, s, out, a.n, a.state);
      }
      check_launch(a.kind == RandomKind::kUniform ? "rand" : "randn");
      launch_kernel(advance_offset_kernel, 1, 1, 0, s, a.state, a.n);
      check_launch("rng_advance");
    }
  });
}

}  // namespace

extern const CopyKernels kCopy = {kernel<&fill_launch>(), kernel<&copy_launch>(), kernel<&arange_launch>(),
                                  kernel<&random_launch>()};

// One kernel stands for all: every .cu file is compiled for the same -arch.
bool kernels_wait_for_predecessors() {
  cudaFuncAttributes attributes{};
  if (cudaFuncGetAttributes(&attributes, advance_offset_kernel) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attributes.ptxVersion >= 90;
}

}  // namespace encore::cuda
