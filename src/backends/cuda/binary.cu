// CUDA kernels for broadcasting binary arithmetic and tensor-scalar
// arithmetic (contracts: BinaryArgs in src/backends/kernel_table.h).
// Kernels, then launchers. f32 math uses explicitly rounded
// intrinsics (no contraction into FMA), so results equal the CPU's bit for bit.
#include <type_traits>

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
  } else {
    if constexpr (kOp == BinaryOp::kAdd) return a + alpha * b;
    if constexpr (kOp == BinaryOp::kSub) return a - alpha * b;
    if constexpr (kOp == BinaryOp::kMul) return a * b;
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
  } else {
    if constexpr (kOp == ScalarOp::kAdd) return a + s;
    if constexpr (kOp == ScalarOp::kMul) return a * s;
    if constexpr (kOp == ScalarOp::kRsub) return s - a;
    if constexpr (kOp == ScalarOp::kRdiv) return s / a;
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
      }
    }
  });
}

}  // namespace

extern const BinaryKernels kBinary = {kernel<&binary_launch>(), kernel<&binary_scalar_launch>()};

}  // namespace encore::cuda
