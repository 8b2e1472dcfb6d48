// The CPU kernels of broadcasting binary arithmetic and tensor-scalar
// arithmetic (contracts: BinaryArgs in src/backends/kernel_table.h).
#include "src/backends/cpu/dispatch.h"
#include "src/backends/cpu/loops.h"
#include "src/backends/cpu/parallel.h"
#include "src/backends/kernel_table.h"

namespace encore::cpu {
namespace {

using namespace backend;   // the shared argument structs, kinds and formulas

// ---- kernels ----

template <typename C, BinaryOp kOp>
inline C apply_binary(C a, C b, C alpha) {
  if constexpr (kOp == BinaryOp::kAdd) return a + alpha * b;
  if constexpr (kOp == BinaryOp::kSub) return a - alpha * b;
  if constexpr (kOp == BinaryOp::kMul) return a * b;
  if constexpr (kOp == BinaryOp::kDiv) return a / b;
}

template <typename C, ScalarOp kOp>
inline C apply_scalar(C a, C s) {
  if constexpr (kOp == ScalarOp::kAdd) return a + s;
  if constexpr (kOp == ScalarOp::kMul) return a * s;
  if constexpr (kOp == ScalarOp::kRsub) return s - a;
  if constexpr (kOp == ScalarOp::kRdiv) return s / a;
}

template <typename T, BinaryOp kOp>
void binary_loop(const BinaryArgs& a) {
  using C = compute_t<T>;
  const C alpha = static_cast<C>(a.alpha);
  const Layout<3>& l = a.l;
  parallel_for(l.numel, kGrainElementwise, [&](int64_t b, int64_t e) {
    if (l.contiguous) {
      T* o = reinterpret_cast<T*>(l.ptr[0]);
      const T* x = reinterpret_cast<const T*>(l.ptr[1]);
      const T* y = reinterpret_cast<const T*>(l.ptr[2]);
      for (int64_t i = b; i < e; ++i) o[i] = T(apply_binary<C, kOp>(C(x[i]), C(y[i]), alpha));
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
      T* o = reinterpret_cast<T*>(l.ptr[0]);
      const T* x = reinterpret_cast<const T*>(l.ptr[1]);
      for (int64_t i = b; i < e; ++i) o[i] = T(apply_scalar<C, kOp>(C(x[i]), s));
    } else {
      for_each_element(l, b, e, [&](char** p) {
        *reinterpret_cast<T*>(p[0]) = T(apply_scalar<C, kOp>(C(*reinterpret_cast<const T*>(p[1])), s));
      });
    }
  });
}

// ---- kernel table entries: the runtime dtype and op as template arguments ----

void binary_kernel(const BinaryArgs& a) {
  dispatch_numeric(a.dtype, "add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    switch (a.op) {
      case BinaryOp::kAdd: return binary_loop<T, BinaryOp::kAdd>(a);
      case BinaryOp::kSub: return binary_loop<T, BinaryOp::kSub>(a);
      case BinaryOp::kMul: return binary_loop<T, BinaryOp::kMul>(a);
      case BinaryOp::kDiv: return binary_loop<T, BinaryOp::kDiv>(a);
    }
  });
}

void binary_scalar_kernel(const BinaryScalarArgs& a) {
  dispatch_numeric(a.dtype, "add_scalar", [&](auto tag) {
    using T = typename decltype(tag)::type;
    switch (a.op) {
      case ScalarOp::kAdd: return scalar_loop<T, ScalarOp::kAdd>(a);
      case ScalarOp::kMul: return scalar_loop<T, ScalarOp::kMul>(a);
      case ScalarOp::kRsub: return scalar_loop<T, ScalarOp::kRsub>(a);
      case ScalarOp::kRdiv: return scalar_loop<T, ScalarOp::kRdiv>(a);
    }
  });
}

}  // namespace

extern const BinaryKernels kBinary = {kernel<&binary_kernel>(), kernel<&binary_scalar_kernel>()};

}  // namespace encore::cpu
