// Element conversions of the CUDA kernels between storage types (float,
// __half, __nv_bfloat16, int32_t, int64_t, bool) and their compute types,
// bit for bit as backend::convert (src/backends/convert.h) and
// encore::Half/BFloat16 (NaN patterns and float-to-integer saturation
// included). Every kernel
// family loads and stores elements through these. nvcc-safe: CUDA and
// standard headers only.
//
//   float v = to_compute(x);           // __half / __nv_bfloat16 -> float; others unchanged
//   out[i] = convert<__half>(v * 2.f);  // round to nearest even, as the CPU does
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "src/backends/float_to_int.h"

namespace encore::cuda {

template <typename T>
inline constexpr bool is_half_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

template <typename T>
using compute_t = std::conditional_t<is_half_v<T>, float, T>;

template <typename T>
__device__ __forceinline__ float to_float(T x) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(x);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(x);
  else return static_cast<float>(x);
}

// float -> f16/bf16, round to nearest even, bit for bit like encore::Half /
// encore::BFloat16 (include/encore/dtype.h), NaNs included (CUDA's own
// conversions would return a different NaN pattern).
__device__ __forceinline__ __half float_to_half(float f) {
  if (isnan(f)) {
    __half_raw r;
    r.x = static_cast<unsigned short>(((__float_as_uint(f) >> 16) & 0x8000u) | 0x7e00u);
    return __half(r);
  }
  return __float2half_rn(f);
}

__device__ __forceinline__ __nv_bfloat16 float_to_bfloat16(float f) {
  if (isnan(f)) {
    __nv_bfloat16_raw r;
    r.x = static_cast<unsigned short>((__float_as_uint(f) >> 16) | 0x40u);
    return __nv_bfloat16(r);
  }
  return __float2bfloat16_rn(f);
}

// One element between storage types, exactly as backend::convert: f16/bf16
// through float; to bool: (float)x != 0; a float to an integer:
// backend::float_to_int (NaN 0, saturating).
template <typename To, typename From>
__device__ __forceinline__ To convert(From x) {
  if constexpr (std::is_same_v<To, bool>) return to_float(x) != 0.0f;
  else if constexpr (std::is_same_v<To, __half>) return float_to_half(to_float(x));
  else if constexpr (std::is_same_v<To, __nv_bfloat16>) return float_to_bfloat16(to_float(x));
  else if constexpr (std::is_integral_v<To> && is_half_v<From>) return backend::float_to_int<To>(to_float(x));
  else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) return backend::float_to_int<To>(x);
  else return static_cast<To>(x);
}

// An element as its compute type: f16/bf16 as float, others as they are.
template <typename T>
__device__ __forceinline__ compute_t<T> to_compute(T x) {
  if constexpr (is_half_v<T>) return to_float(x);
  else return x;
}

}  // namespace encore::cuda
