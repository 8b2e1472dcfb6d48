// Element values between storage types, on the host: convert<To>(from), the
// one conversion rule of every copy, .to(dtype), fill and masked_fill value
// (the CPU kernels use it per element; cuda/convert.cuh is its device twin,
// bit for bit), and the packing of a host scalar into a kernel argument
// (value_bits on the host, from_bits in a CPU or CUDA kernel). nvcc-safe: no
// Abseil, no tensor types.
//
//   const Half h = backend::convert<Half>(0.1);             // round to nearest even, as Half(float(0.1))
//   const uint64_t bits = backend::value_bits(kInt32, 3e9);   // 2147483647's four bytes (saturated)
//   const int32_t v = backend::from_bits<int32_t>(bits);      // in the kernel
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "encore/dtype.h"
#include "src/backends/float_to_int.h"
#include "src/core/host_device.h"

namespace encore::backend {

// Converts one element between host storage types (float, Half, BFloat16,
// int32_t, int64_t, bool, and double for host scalars): f16/bf16 through
// float; to bool: != 0; a float to an integer: float_to_int (NaN 0,
// saturating), as on CUDA.
template <typename To, typename From>
inline To convert(From x) {
  constexpr bool kHalfFrom = std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>;
  if constexpr (std::is_same_v<To, bool>) {
    return static_cast<float>(x) != 0.0f;
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    return To(static_cast<float>(x));
  } else if constexpr (std::is_integral_v<To> && kHalfFrom) {
    return float_to_int<To>(static_cast<float>(x));
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    return float_to_int<To>(x);
  } else {
    return static_cast<To>(x);
  }
}

// The storage bytes of v in the low bytes of a uint64_t (the rest zero).
template <typename T>
inline uint64_t bits_of(T v) {
  static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable_v<T>);
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}

// A host scalar converted to `t` (convert<T>(v)), as storage bytes: the
// value_bits field of FillArgs and MaskedFillArgs (kernel_table.h).
inline uint64_t value_bits(DType t, double v) {
  switch (t) {
    case DType::kFloat32: return bits_of(convert<float>(v));
    case DType::kFloat16: return bits_of(convert<Half>(v));
    case DType::kBFloat16: return bits_of(convert<BFloat16>(v));
    case DType::kInt32: return bits_of(convert<int32_t>(v));
    case DType::kInt64: return bits_of(convert<int64_t>(v));
    case DType::kBool: return bits_of(convert<bool>(v));
  }
  return 0;
}

// The value that value_bits packed, as storage type T (on the device: any
// type of T's size, e.g. __half for Half, uint16_t where only bytes move).
template <typename T>
ENCORE_HOST_DEVICE T from_bits(uint64_t bits) {
  T v;
  memcpy(static_cast<void*>(&v), &bits, sizeof(T));   // void*: Half's default member initializer is no obstacle
  return v;
}

}  // namespace encore::backend
