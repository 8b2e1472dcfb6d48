// Compile-time dtype dispatch for CPU kernels, and the compute type of each
// storage type (f16/bf16 compute in float).
//
//   dispatch_all(t.dtype(), "add", [&](auto tag) {
//     using T = typename decltype(tag)::type;   // float, Half, BFloat16, int32_t, ...
//     launch_kernel<T>(...);
//   });
#pragma once

#include <cstdint>
#include <type_traits>

#include "encore/dtype.h"
#include "encore/error.h"

namespace encore::cpu {

template <typename T> struct Tag { using type = T; };

template <typename T>
using compute_t = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;

// float, Half, BFloat16.
template <typename F>
decltype(auto) dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::kFloat32: return f(Tag<float>{});
    case DType::kFloat16: return f(Tag<Half>{});
    case DType::kBFloat16: return f(Tag<BFloat16>{});
    default:
      throw_error(absl::StatusCode::kInvalidArgument,
                  absl::StrFormat("%s: dtype %s is not supported (needs f32, f16 or bf16)", op, dtype_name(t)));
  }
}

// Floats and integers (not bool).
template <typename F>
decltype(auto) dispatch_numeric(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::kInt32: return f(Tag<int32_t>{});
    case DType::kInt64: return f(Tag<int64_t>{});
    default: return dispatch_float(t, op, std::forward<F>(f));
  }
}

// Every dtype.
template <typename F>
decltype(auto) dispatch_all(DType t, const char* op, F&& f) {
  if (t == DType::kBool) return f(Tag<bool>{});
  return dispatch_numeric(t, op, std::forward<F>(f));
}

}  // namespace encore::cpu
