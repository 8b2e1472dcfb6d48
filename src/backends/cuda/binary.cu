// CUDA kernels for broadcasting binary arithmetic, tensor-scalar arithmetic
// and comparisons (contracts: BinaryArgs, CompareArgs in
// src/backends/kernel_table.h).
// Kernels, then launchers. f32 math uses explicitly rounded
// intrinsics (no contraction into FMA), so results equal the CPU's bit for bit.
#include <type_traits>

#include "src/backends/convert.h"
#include "src/backends/cuda/elementwise.cuh"
#include "src/backends/kernel_table.h"

namespace encore::cuda {
namespace {

using namespace backend;   // the shared argument structs, kinds and formulas

// ---- kernels ----

template <typename C, BinaryOp kOp>
__device__ __forceinline__ C apply_binary(C a, C b, C alpha) {
  if constexpr (std::is_same_v<C, float>) {
    if constexpr (kOp == BinaryOp::kAdd) return __fadd_rn(a, __fmul_rn(alpha, b));
    if constexpr (kOp == BinaryOp::kSub) return __fsub_rn(a, __fmul_rn(alpha, b));
    if constexpr (kOp == BinaryOp::kMul) return __fmul_rn(a, b);
    if constexpr (kOp == BinaryOp::kDiv) return __fdiv_rn(a, b);
  } else {   // i32/i64: +, - and * wrap around in the unsigned type, as on the CPU (signed overflow is undefined)
    using U = std::make_unsigned_t<C>;
    if constexpr (kOp == BinaryOp::kAdd) return C(U(a) + U(alpha) * U(b));
    if constexpr (kOp == BinaryOp::kSub) return C(U(a) - U(alpha) * U(b));
    if constexpr (kOp == BinaryOp::kMul) return C(U(a) * U(b));
    if constexpr (kOp == BinaryOp::kDiv) return a / b;   // integer division by zero: unspecified, as on the CPU
  }
}

template <typename C, ScalarOp kOp>
__device__ __forceinline__ C apply_scalar(C a, C s) {
  if constexpr (std::is_same_v<C, float>) {
    if constexpr (kOp == ScalarOp::kAdd) return __fadd_rn(a, s);
    if constexpr (kOp == ScalarOp::kMul) return __fmul_rn(a, s);
    if constexpr (kOp == ScalarOp::kRsub) return __fsub_rn(s, a);
    if constexpr (kOp == ScalarOp::kRdiv) return __fdiv_rn(s, a);
    if constexpr (kOp == ScalarOp::kDiv) return __fdiv_rn(a, s);
  } else {   // i32/i64: wrapping, as apply_binary
    using U = std::make_unsigned_t<C>;
    if constexpr (kOp == ScalarOp::kAdd) return C(U(a) + U(s));
    if constexpr (kOp == ScalarOp::kMul) return C(U(a) * U(s));
    if constexpr (kOp == ScalarOp::kRsub) return C(U(s) - U(a));
    if constexpr (kOp == ScalarOp::kRdiv) return s / a;
    if constexpr (kOp == ScalarOp::kDiv) return a / s;
  }
}

template <typename T, BinaryOp kOp>
struct BinaryFn {   // operands out, a, b
  compute_t<T> alpha;
  __device__ void operator()(char* const* p) const {
    store<T>(p[0], apply_binary<compute_t<T>, kOp>(load<T>(p[1]), load<T>(p[2]), alpha));
  }
};

template <typename T, ScalarOp kOp>
struct ScalarFn {   // operands out, a
  compute_t<T> s;
  __device__ void operator()(char* const* p) const { store<T>(p[0], apply_scalar<compute_t<T>, kOp>(load<T>(p[1]), s)); }
};

template <typename C, CompareOp kOp>
__device__ __forceinline__ bool apply_compare(C a, C b) {
  if constexpr (kOp == CompareOp::kEq) return a == b;
  if constexpr (kOp == CompareOp::kNe) return a != b;
  if constexpr (kOp == CompareOp::kLt) return a < b;
  if constexpr (kOp == CompareOp::kLe) return a <= b;
  if constexpr (kOp == CompareOp::kGt) return a > b;
  if constexpr (kOp == CompareOp::kGe) return a >= b;
}

template <typename T, CompareOp kOp>
struct CompareFn {   // operands out (bool), a, b
  __device__ void operator()(char* const* p) const {
    *reinterpret_cast<bool*>(p[0]) = apply_compare<compute_t<T>, kOp>(load<T>(p[1]), load<T>(p[2]));
  }
};

template <typename T, CompareOp kOp>
struct CompareScalarFn {   // operands out (bool), a
  T s;                     // in the storage type; widened on the device
  __device__ void operator()(char* const* p) const {
    *reinterpret_cast<bool*>(p[0]) = apply_compare<compute_t<T>, kOp>(load<T>(p[1]), to_compute(s));
  }
};

// ---- launchers ----

void binary_launch(const BinaryArgs& a) {
  visit_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      const compute_t<T> alpha = static_cast<compute_t<T>>(a.alpha);   // on the host, like the CPU kernel
      switch (a.op) {
        case BinaryOp::kAdd: return launch_elementwise(a.l, BinaryFn<T, BinaryOp::kAdd>{alpha}, "add");
        case BinaryOp::kSub: return launch_elementwise(a.l, BinaryFn<T, BinaryOp::kSub>{alpha}, "sub");
        case BinaryOp::kMul: return launch_elementwise(a.l, BinaryFn<T, BinaryOp::kMul>{alpha}, "mul");
        case BinaryOp::kDiv: return launch_elementwise(a.l, BinaryFn<T, BinaryOp::kDiv>{alpha}, "div");
      }
    }
  });
}

void binary_scalar_launch(const BinaryScalarArgs& a) {
  visit_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      const compute_t<T> s = static_cast<compute_t<T>>(a.s);
      switch (a.op) {
        case ScalarOp::kAdd: return launch_elementwise(a.l, ScalarFn<T, ScalarOp::kAdd>{s}, "add_scalar");
        case ScalarOp::kMul: return launch_elementwise(a.l, ScalarFn<T, ScalarOp::kMul>{s}, "mul_scalar");
        case ScalarOp::kRsub: return launch_elementwise(a.l, ScalarFn<T, ScalarOp::kRsub>{s}, "rsub_scalar");
        case ScalarOp::kRdiv: return launch_elementwise(a.l, ScalarFn<T, ScalarOp::kRdiv>{s}, "rdiv_scalar");
        case ScalarOp::kDiv: return launch_elementwise(a.l, ScalarFn<T, ScalarOp::kDiv>{s}, "div_scalar");
      }
    }
  });
}

template <template <typename, CompareOp> class Fn, typename T, int N, typename... Extra>
void launch_compare(CompareOp op, const Layout<N>& l, const char* name, Extra... extra) {
  switch (op) {
    case CompareOp::kEq: return launch_elementwise(l, Fn<T, CompareOp::kEq>{extra...}, name);
    case CompareOp::kNe: return launch_elementwise(l, Fn<T, CompareOp::kNe>{extra...}, name);
    case CompareOp::kLt: return launch_elementwise(l, Fn<T, CompareOp::kLt>{extra...}, name);
    case CompareOp::kLe: return launch_elementwise(l, Fn<T, CompareOp::kLe>{extra...}, name);
    case CompareOp::kGt: return launch_elementwise(l, Fn<T, CompareOp::kGt>{extra...}, name);
    case CompareOp::kGe: return launch_elementwise(l, Fn<T, CompareOp::kGe>{extra...}, name);
  }
}

void compare_launch(const CompareArgs& a) {
  visit_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_compare<CompareFn, T>(a.op, a.l, kCompareNames[static_cast<int>(a.op)]);
  });
}

void compare_scalar_launch(const CompareScalarArgs& a) {
  visit_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T s = backend::from_bits<T>(a.value_bits);
    launch_compare<CompareScalarFn, T>(a.op, a.l, kCompareScalarNames[static_cast<int>(a.op)], s);
  });
}

}  // namespace

extern const BinaryKernels kBinary = {kernel<&binary_launch>(), kernel<&binary_scalar_launch>(),
                                      kernel<&compare_launch>(), kernel<&compare_scalar_launch>()};

}  // namespace encore::cuda
