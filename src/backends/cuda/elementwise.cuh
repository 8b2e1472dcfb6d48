// Device-side building blocks of the CUDA elementwise kernels: element
// addresses from a Layout, one grid-stride kernel template that applies a
// functor to every element, and loads/stores through the dtype conversions of
// convert.cuh. nvcc-safe: CUDA and standard headers only.
//
//   struct Twice {
//     __device__ void operator()(char* const* p) const {   // p[k]: operand k's element
//       *reinterpret_cast<float*>(p[0]) = 2.f * *reinterpret_cast<const float*>(p[1]);
//     }
//   };
//   launch_elementwise(layout, Twice{}, "twice");   // on the host, inside a launcher
//
// Storage types on the device: float, __half, __nv_bfloat16, int32_t,
// int64_t, bool (one byte, 0 or 1). f16/bf16 compute in float (compute_t).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "encore/dtype.h"
#include "src/backends/cuda/convert.cuh"
#include "src/backends/cuda/launch.h"
#include "src/backends/layout.h"

namespace encore::cuda {

using backend::Layout;

// ---- element addresses ----

// p[k] = address of operand k's element at row-major index i of the output
// (i < l.numel). One division per dim; the common merged case (ndim 1) none.
// Index: uint32_t when numel < 2^31 (32-bit division is several times
// cheaper than 64-bit), else int64_t; byte offsets are always 64-bit.
template <typename Index, int N>
__device__ __forceinline__ void element_ptrs(const Layout<N>& l, Index i, char* (&p)[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k) p[k] = l.ptr[k];
  if (l.ndim == 1) {
#pragma unroll
    for (int k = 0; k < N; ++k) p[k] += static_cast<int64_t>(i) * l.stride[k][0];
    return;
  }
  for (int d = l.ndim - 1; d >= 0; --d) {
    const Index size = static_cast<Index>(l.shape[d]);
    const Index q = i / size;
    const int64_t idx = static_cast<int64_t>(i - q * size);
    i = q;
#pragma unroll
    for (int k = 0; k < N; ++k) p[k] += idx * l.stride[k][d];
  }
}

// Applies f(char* const* p) to every element; each element is visited by
// exactly one thread, so an output may alias an input elementwise (in place).
// With Index = uint32_t, numel < 2^31 keeps i + grid stride below 2^32.
template <typename Index, int N, typename F>
__global__ void __launch_bounds__(kThreads) elementwise_kernel(Layout<N> l, F f) {
  kernel_prologue();
  const Index n = static_cast<Index>(l.numel);
  const Index step = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    char* p[N];
    element_ptrs(l, i, p);
    f(p);
  }
}

// Host: launches elementwise_kernel on encore's active stream (nothing for an
// empty layout) and checks the launch, naming `op`.
template <int N, typename F>
void launch_elementwise(const Layout<N>& l, const F& f, const char* op) {
  if (l.numel <= 0) return;
  if (l.numel < (int64_t{1} << 31)) {
    launch_kernel(elementwise_kernel<uint32_t, N, F>, blocks_for(l.numel), kThreads, 0, active_stream(), l, f);
  } else {
    launch_kernel(elementwise_kernel<int64_t, N, F>, blocks_for(l.numel), kThreads, 0, active_stream(), l, f);
  }
  check_launch(op);
}

// ---- dtypes ----

template <typename T> struct Tag { using type = T; };

// Calls f(Tag<T>{}) with T the float storage type of `t`: f32, f16 or bf16
// (the host checked which; anything else calls nothing).
template <typename F>
void with_float(DType t, F&& f) {
  switch (t) {
    case DType::kFloat32: return f(Tag<float>{});
    case DType::kFloat16: return f(Tag<__half>{});
    case DType::kBFloat16: return f(Tag<__nv_bfloat16>{});
    default: return;
  }
}

// Calls f(Tag<T>{}) with T the index type of `t`: i32, else i64 (the host checked which).
template <typename F>
void with_index(DType t, F&& f) {
  if (t == DType::kInt32) f(Tag<int32_t>{});
  else f(Tag<int64_t>{});
}

// Calls f(Tag<T>{}) with T the device storage type of `t`.
template <typename F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::kFloat32: return f(Tag<float>{});
    case DType::kFloat16: return f(Tag<__half>{});
    case DType::kBFloat16: return f(Tag<__nv_bfloat16>{});
    case DType::kInt32: return f(Tag<int32_t>{});
    case DType::kInt64: return f(Tag<int64_t>{});
    case DType::kBool: break;
  }
  return f(Tag<bool>{});
}


// Loads an element of storage type T as its compute type; stores one back
// (f16/bf16 rounded like the CPU).
template <typename T>
__device__ __forceinline__ compute_t<T> load(const char* p) {
  return to_compute(*reinterpret_cast<const T*>(p));
}

template <typename T>
__device__ __forceinline__ void store(char* p, compute_t<T> v) {
  if constexpr (is_half_v<T>) *reinterpret_cast<T*>(p) = convert<T>(v);
  else *reinterpret_cast<T*>(p) = v;
}

// Same-size unsigned integer stand-in for storage type T, for kernels that
// only move bytes (select, fill, same-dtype copy): every dtype exact.
template <typename T>
using Bits = std::conditional_t<sizeof(T) == 1, uint8_t,
                                std::conditional_t<sizeof(T) == 2, uint16_t,
                                                   std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;

}  // namespace encore::cuda
