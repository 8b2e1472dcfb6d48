// CPU kernels that create and move data: fill, strided copy with dtype
// conversion, arange, and Philox random draws. Each launcher takes tensors,
// packs plain arguments and launches through current_stream(kCPU).
#pragma once

#include <cstdint>
#include <type_traits>

#include "encore/tensor.h"
#include "src/backends/float_to_int.h"
#include "src/backends/op_kinds.h"

namespace encore::cpu {

void fill(const Tensor& out, double value);                 // out: any strides
void copy(const Tensor& dst, const Tensor& src);            // src broadcast to dst; dtype converted
void arange(const Tensor& out, double start, double step);  // out contiguous
using backend::RandomKind;
// out contiguous float; state: i64 [2] {seed, offset}; the kernel advances offset by numel.
void random(const Tensor& out, const Tensor& state, RandomKind kind);

// Converts one element between storage types (f16/bf16 through float; to bool:
// != 0; a float to an integer: backend::float_to_int, as on CUDA).
template <typename To, typename From>
inline To convert(From x) {
  constexpr bool kHalfFrom = std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>;
  if constexpr (std::is_same_v<To, bool>) {
    return static_cast<float>(x) != 0.0f;
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    return To(static_cast<float>(x));
  } else if constexpr (std::is_integral_v<To> && kHalfFrom) {
    return backend::float_to_int<To>(static_cast<float>(x));
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    return backend::float_to_int<To>(x);
  } else {
    return static_cast<To>(x);
  }
}

}  // namespace encore::cpu
