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
#include "src/core/kernel.h"

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

// Kernel table entries that specialize on one dtype (NOTE [ Specialized
// kernels ] in src/core/kernel.h): Entry<T>::run is the entry compiled for
// storage type T, and pick_float/pick_numeric/pick_all<Entry> the
// specializer that returns its thunk for args.dtype (which the host side
// has checked; the op name only labels an impossible error).
//
//   template <typename T> struct ScaleEntry { static void run(const ScaleArgs& a) { scale_loop<T>(a); } };
//   constexpr Kernel<ScaleArgs> kScale = specialized_kernel<&pick_float<ScaleEntry, ScaleArgs>>();
template <template <typename> class Entry, typename Args>
KernelThunk pick_float(const Args& a) {
  return dispatch_float(a.dtype, "cpu",
                      [](auto tag) { return thunk_of<&Entry<typename decltype(tag)::type>::run>(); });
}
template <template <typename> class Entry, typename Args>
KernelThunk pick_numeric(const Args& a) {
  return dispatch_numeric(a.dtype, "cpu",
                      [](auto tag) { return thunk_of<&Entry<typename decltype(tag)::type>::run>(); });
}
template <template <typename> class Entry, typename Args>
KernelThunk pick_all(const Args& a) {
  return dispatch_all(a.dtype, "cpu",
                      [](auto tag) { return thunk_of<&Entry<typename decltype(tag)::type>::run>(); });
}

}  // namespace encore::cpu
