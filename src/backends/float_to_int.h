// How both backends turn a floating-point value into an integer element
// (copy / .to(kInt32), fill, arange, masked_fill values): truncate toward
// zero, NaN gives 0, and values beyond the type's range saturate to its
// limits. A plain cast is undefined behaviour there, and the hardware
// disagrees (x86 gives INT_MIN for NaN and for every value out of range, the
// GPU saturates): this one function makes CPU and CUDA give the same bits.
// Host and device code (the CUDA kernels include it).
//
//   int32_t i = encore::backend::float_to_int<int32_t>(3e9f);   // 2147483647
//   int64_t j = encore::backend::float_to_int<int64_t>(NAN);    // 0
#pragma once

#include <cstdint>
#include <type_traits>

#include "src/core/host_device.h"

namespace encore::backend {

// I: int32_t or int64_t; F: float or double.
template <typename I, typename F>
ENCORE_HOST_DEVICE I float_to_int(F v) {
  // The limits without std::numeric_limits, whose host-only functions nvcc
  // refuses in device code.
  constexpr I kMax = static_cast<I>(~std::make_unsigned_t<I>{0} >> 1);
  constexpr I kMin = -kMax - 1;
  constexpr F kLo = static_cast<F>(kMin);   // -2^31 or -2^63: exact
  constexpr F kHi = static_cast<F>(kMax);   // 2^31 - 1 exact in double; else rounds up to 2^31 or 2^63
  if (!(v == v)) return 0;                  // NaN
  if (v < kLo) return kMin;
  if (v >= kHi) return kMax;                // where kHi rounded up, every v >= kHi is out of range
  return static_cast<I>(v);
}

}  // namespace encore::backend
