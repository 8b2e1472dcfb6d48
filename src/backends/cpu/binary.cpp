// The CPU kernels of broadcasting binary arithmetic, tensor-scalar
// arithmetic and comparisons (contracts: BinaryArgs, CompareArgs in
// src/backends/kernel_table.h).
#include <type_traits>

#include "src/backends/convert.h"
#include "src/backends/cpu/dispatch.h"
#include "src/backends/cpu/loops.h"
#include "src/backends/cpu/parallel.h"
#include "src/backends/cpu/simd.h"
#include "src/backends/kernel_table.h"

namespace encore::cpu {
namespace {

using namespace backend;   // the shared argument structs, kinds and formulas

// ---- kernels ----

// The type C's +, - and * run in: for i32/i64 the unsigned type of their
// size, so that they wrap around (two's complement, as sum, abs, neg and
// scatter_add do) where the signed ones would overflow, which is undefined;
// the conversion back to C is modular. Floats: C itself.
template <typename C>
using Wrapping = typename std::conditional_t<std::is_integral_v<C>, std::make_unsigned<C>,
                                             std::type_identity<C>>::type;

// Division stays in C: the ops refuse integer div and rdiv.
template <typename C, BinaryOp kOp>
ENCORE_SIMD_INLINE C apply_binary(C a, C b, C alpha) {
  using W = Wrapping<C>;
  if constexpr (kOp == BinaryOp::kAdd) return C(W(a) + W(alpha) * W(b));
  if constexpr (kOp == BinaryOp::kSub) return C(W(a) - W(alpha) * W(b));
  if constexpr (kOp == BinaryOp::kMul) return C(W(a) * W(b));
  if constexpr (kOp == BinaryOp::kDiv) return a / b;
}

template <typename C, ScalarOp kOp>
ENCORE_SIMD_INLINE C apply_scalar(C a, C s) {
  using W = Wrapping<C>;
  if constexpr (kOp == ScalarOp::kAdd) return C(W(a) + W(s));
  if constexpr (kOp == ScalarOp::kMul) return C(W(a) * W(s));
  if constexpr (kOp == ScalarOp::kRsub) return C(W(s) - W(a));
  if constexpr (kOp == ScalarOp::kRdiv) return s / a;
  if constexpr (kOp == ScalarOp::kDiv) return a / s;
}

// The contiguous loops, one clone per x86-64 level (simd.h). No __restrict:
// in-place ops (add_) pass the output as an input.
template <typename T, BinaryOp kOp>
ENCORE_SIMD_CLONES void binary_run(T* o, const T* x, const T* y, int64_t n, compute_t<T> alpha) {
  using C = compute_t<T>;
  for (int64_t i = 0; i < n; ++i) o[i] = T(apply_binary<C, kOp>(C(x[i]), C(y[i]), alpha));
}

template <typename T, ScalarOp kOp>
ENCORE_SIMD_CLONES void scalar_run(T* o, const T* x, int64_t n, compute_t<T> s) {
  using C = compute_t<T>;
  for (int64_t i = 0; i < n; ++i) o[i] = T(apply_scalar<C, kOp>(C(x[i]), s));
}

template <typename T, BinaryOp kOp>
void binary_loop(const BinaryArgs& a) {
  using C = compute_t<T>;
  const C alpha = static_cast<C>(a.alpha);
  const Layout<3>& l = a.l;
  parallel_for(l.numel, kGrainElementwise, [&](int64_t b, int64_t e) {
    if (l.contiguous) {
      binary_run<T, kOp>(reinterpret_cast<T*>(l.ptr[0]) + b, reinterpret_cast<const T*>(l.ptr[1]) + b,
                         reinterpret_cast<const T*>(l.ptr[2]) + b, e - b, alpha);
    } else {
      for_each_element(l, b, e, [&](char** p) {
        *reinterpret_cast<T*>(p[0]) = T(apply_binary<C, kOp>(C(*reinterpret_cast<const T*>(p[1])),
                                                             C(*reinterpret_cast<const T*>(p[2])), alpha));
      });
    }
  });
}

template <typename T, ScalarOp kOp>
void scalar_loop(const BinaryScalarArgs& a) {
  using C = compute_t<T>;
  const C s = static_cast<C>(a.s);
  const Layout<2>& l = a.l;
  parallel_for(l.numel, kGrainElementwise, [&](int64_t b, int64_t e) {
    if (l.contiguous) {
      scalar_run<T, kOp>(reinterpret_cast<T*>(l.ptr[0]) + b, reinterpret_cast<const T*>(l.ptr[1]) + b, e - b, s);
    } else {
      for_each_element(l, b, e, [&](char** p) {
        *reinterpret_cast<T*>(p[0]) = T(apply_scalar<C, kOp>(C(*reinterpret_cast<const T*>(p[1])), s));
      });
    }
  });
}

template <typename C, CompareOp kOp>
ENCORE_SIMD_INLINE bool apply_compare(C a, C b) {
  if constexpr (kOp == CompareOp::kEq) return a == b;
  if constexpr (kOp == CompareOp::kNe) return a != b;
  if constexpr (kOp == CompareOp::kLt) return a < b;
  if constexpr (kOp == CompareOp::kLe) return a <= b;
  if constexpr (kOp == CompareOp::kGt) return a > b;
  if constexpr (kOp == CompareOp::kGe) return a >= b;
}

template <typename T, CompareOp kOp>
ENCORE_SIMD_CLONES void compare_run(bool* o, const T* x, const T* y, int64_t n) {
  using C = compute_t<T>;
  for (int64_t i = 0; i < n; ++i) o[i] = apply_compare<C, kOp>(C(x[i]), C(y[i]));
}

template <typename T, CompareOp kOp>
ENCORE_SIMD_CLONES void compare_scalar_run(bool* o, const T* x, int64_t n, compute_t<T> s) {
  using C = compute_t<T>;
  for (int64_t i = 0; i < n; ++i) o[i] = apply_compare<C, kOp>(C(x[i]), s);
}

template <typename T, CompareOp kOp>
void compare_loop(const CompareArgs& a) {
  using C = compute_t<T>;
  const Layout<3>& l = a.l;
  parallel_for(l.numel, kGrainElementwise, [&](int64_t b, int64_t e) {
    if (l.contiguous) {
      compare_run<T, kOp>(reinterpret_cast<bool*>(l.ptr[0]) + b, reinterpret_cast<const T*>(l.ptr[1]) + b,
                          reinterpret_cast<const T*>(l.ptr[2]) + b, e - b);
    } else {
      for_each_element(l, b, e, [&](char** p) {
        *reinterpret_cast<bool*>(p[0]) =
            apply_compare<C, kOp>(C(*reinterpret_cast<const T*>(p[1])), C(*reinterpret_cast<const T*>(p[2])));
      });
    }
  });
}

template <typename T, CompareOp kOp>
void compare_scalar_loop(const CompareScalarArgs& a) {
  using C = compute_t<T>;
  const C s = C(from_bits<T>(a.value_bits));
  const Layout<2>& l = a.l;
  parallel_for(l.numel, kGrainElementwise, [&](int64_t b, int64_t e) {
    if (l.contiguous) {
      compare_scalar_run<T, kOp>(reinterpret_cast<bool*>(l.ptr[0]) + b, reinterpret_cast<const T*>(l.ptr[1]) + b,
                                 e - b, s);
    } else {
      for_each_element(l, b, e, [&](char** p) {
        *reinterpret_cast<bool*>(p[0]) = apply_compare<C, kOp>(C(*reinterpret_cast<const T*>(p[1])), s);
      });
    }
  });
}

// ---- kernel table entries: the runtime dtype and op picked once per launch ----
// (NOTE [ Specialized kernels ] in src/core/kernel.h: a replay calls the loop directly)

KernelThunk pick_binary(const BinaryArgs& a) {
  return dispatch_numeric(a.dtype, "add", [&](auto tag) -> KernelThunk {
    using T = typename decltype(tag)::type;
    switch (a.op) {
      case BinaryOp::kAdd: return thunk_of<&binary_loop<T, BinaryOp::kAdd>>();
      case BinaryOp::kSub: return thunk_of<&binary_loop<T, BinaryOp::kSub>>();
      case BinaryOp::kMul: return thunk_of<&binary_loop<T, BinaryOp::kMul>>();
      case BinaryOp::kDiv: break;
    }
    return thunk_of<&binary_loop<T, BinaryOp::kDiv>>();
  });
}

KernelThunk pick_binary_scalar(const BinaryScalarArgs& a) {
  return dispatch_numeric(a.dtype, "add_scalar", [&](auto tag) -> KernelThunk {
    using T = typename decltype(tag)::type;
    switch (a.op) {
      case ScalarOp::kAdd: return thunk_of<&scalar_loop<T, ScalarOp::kAdd>>();
      case ScalarOp::kMul: return thunk_of<&scalar_loop<T, ScalarOp::kMul>>();
      case ScalarOp::kRsub: return thunk_of<&scalar_loop<T, ScalarOp::kRsub>>();
      case ScalarOp::kRdiv: return thunk_of<&scalar_loop<T, ScalarOp::kRdiv>>();
      case ScalarOp::kDiv: break;
    }
    return thunk_of<&scalar_loop<T, ScalarOp::kDiv>>();
  });
}

template <typename T, CompareOp kOp>
struct CompareLoop {
  static constexpr auto* kFn = &compare_loop<T, kOp>;
};
template <typename T, CompareOp kOp>
struct CompareScalarLoop {
  static constexpr auto* kFn = &compare_scalar_loop<T, kOp>;
};

template <template <typename, CompareOp> class Loop, typename T>
KernelThunk compare_thunk_of(CompareOp op) {
  switch (op) {
    case CompareOp::kEq: return thunk_of<Loop<T, CompareOp::kEq>::kFn>();
    case CompareOp::kNe: return thunk_of<Loop<T, CompareOp::kNe>::kFn>();
    case CompareOp::kLt: return thunk_of<Loop<T, CompareOp::kLt>::kFn>();
    case CompareOp::kLe: return thunk_of<Loop<T, CompareOp::kLe>::kFn>();
    case CompareOp::kGt: return thunk_of<Loop<T, CompareOp::kGt>::kFn>();
    case CompareOp::kGe: break;
  }
  return thunk_of<Loop<T, CompareOp::kGe>::kFn>();
}

KernelThunk pick_compare(const CompareArgs& a) {
  return dispatch_all(a.dtype, "compare", [&](auto tag) -> KernelThunk {
    return compare_thunk_of<CompareLoop, typename decltype(tag)::type>(a.op);
  });
}

KernelThunk pick_compare_scalar(const CompareScalarArgs& a) {
  return dispatch_all(a.dtype, "compare_scalar", [&](auto tag) -> KernelThunk {
    return compare_thunk_of<CompareScalarLoop, typename decltype(tag)::type>(a.op);
  });
}

}  // namespace

extern const BinaryKernels kBinary = {specialized_kernel<&pick_binary>(), specialized_kernel<&pick_binary_scalar>(),
                                      specialized_kernel<&pick_compare>(), specialized_kernel<&pick_compare_scalar>()};

}  // namespace encore::cpu
