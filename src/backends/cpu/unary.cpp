// The CPU kernels of elementwise unary math and of its fused backward
// (contracts: UnaryArgs in src/backends/kernel_table.h). The element formulas
// are src/backends/unary_math.h, shared with CUDA.
#include <cstdint>
#include <type_traits>

#include "src/backends/cpu/dispatch.h"
#include "src/backends/cpu/loops.h"
#include "src/backends/cpu/parallel.h"
#include "src/backends/cpu/simd.h"
#include "src/backends/kernel_table.h"
#include "src/backends/unary_math.h"

namespace encore::cpu {
namespace {

using namespace backend;   // the shared argument structs, kinds and formulas

// Cheap ops split work in bigger chunks than transcendental ones.
constexpr int64_t grain_of(UnaryOp op) {
  return op == UnaryOp::kAbs || op == UnaryOp::kRelu || op == UnaryOp::kClamp || op == UnaryOp::kSqrt ||
                 op == UnaryOp::kRsqrt
             ? kGrainElementwise
             : kGrainTranscendental;
}

// ---- kernels ----

// The contiguous loops, one clone per x86-64 level (simd.h): GELU's
// polynomial tanh is 4 lanes wide at baseline, 16 with AVX-512.
template <typename T, UnaryOp kOp>
ENCORE_SIMD_CLONES void unary_run(T* __restrict o, const T* __restrict x, int64_t n, compute_t<T> p0,
                                  compute_t<T> p1) {
  using C = compute_t<T>;
  for (int64_t i = 0; i < n; ++i) o[i] = T(unary_fn<kOp>(C(x[i]), p0, p1));
}

template <typename T, UnaryOp kOp>
ENCORE_SIMD_CLONES void unary_backward_run(T* __restrict o, const T* __restrict g, const T* __restrict s, int64_t n,
                                           compute_t<T> p0, compute_t<T> p1) {
  using C = compute_t<T>;
  for (int64_t i = 0; i < n; ++i) o[i] = T(unary_grad_fn<kOp>(C(g[i]), C(s[i]), p0, p1));
}

// Operands out, a.
template <typename T, UnaryOp kOp>
void unary_loop(const Layout<2>& l, compute_t<T> p0, compute_t<T> p1) {
  using C = compute_t<T>;
  parallel_for(l.numel, grain_of(kOp), [&](int64_t b, int64_t e) {
    if (l.contiguous) {
      unary_run<T, kOp>(reinterpret_cast<T*>(l.ptr[0]) + b, reinterpret_cast<const T*>(l.ptr[1]) + b, e - b, p0,
                        p1);
    } else {
      for_each_element(l, b, e, [&](char** p) {
        *reinterpret_cast<T*>(p[0]) = T(unary_fn<kOp>(C(*reinterpret_cast<const T*>(p[1])), p0, p1));
      });
    }
  });
}

// Operands grad_in, g, saved.
template <typename T, UnaryOp kOp>
void unary_backward_loop(const Layout<3>& l, compute_t<T> p0, compute_t<T> p1) {
  using C = compute_t<T>;
  parallel_for(l.numel, grain_of(kOp), [&](int64_t b, int64_t e) {
    if (l.contiguous) {
      unary_backward_run<T, kOp>(reinterpret_cast<T*>(l.ptr[0]) + b, reinterpret_cast<const T*>(l.ptr[1]) + b,
                                 reinterpret_cast<const T*>(l.ptr[2]) + b, e - b, p0, p1);
    } else {
      for_each_element(l, b, e, [&](char** p) {
        *reinterpret_cast<T*>(p[0]) = T(unary_grad_fn<kOp>(C(*reinterpret_cast<const T*>(p[1])),
                                                           C(*reinterpret_cast<const T*>(p[2])), p0, p1));
      });
    }
  });
}

// ---- kernel table entries: the runtime dtype and op picked once per launch ----
// (NOTE [ Specialized kernels ] in src/core/kernel.h: a replay calls the loop directly)

template <typename T, UnaryOp kOp>
void unary_entry(const UnaryArgs& a) {
  using C = compute_t<T>;
  unary_loop<T, kOp>(a.l, unary_param<C>(a.p0), unary_param<C>(a.p1));
}

template <typename T, UnaryOp kOp>
void unary_backward_entry(const UnaryBackwardArgs& a) {
  using C = compute_t<T>;
  unary_backward_loop<T, kOp>(a.l, unary_param<C>(a.p0), unary_param<C>(a.p1));
}

KernelThunk pick_unary(const UnaryArgs& a) {
  KernelThunk thunk = nullptr;
  dispatch_numeric(a.dtype, "unary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_unary_op(a.op, [&](auto k) {
      constexpr UnaryOp kOp = decltype(k)::value;
      if constexpr (!std::is_integral_v<T> || unary_supports_integers(kOp)) {   // the host refused the rest
        thunk = thunk_of<&unary_entry<T, kOp>>();
      }
    });
  });
  return thunk;
}

KernelThunk pick_unary_backward(const UnaryBackwardArgs& a) {
  KernelThunk thunk = nullptr;
  dispatch_float(a.dtype, "unary_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_unary_op(a.op, [&](auto k) { thunk = thunk_of<&unary_backward_entry<T, decltype(k)::value>>(); });
  });
  return thunk;
}

}  // namespace

extern const UnaryKernels kUnary = {specialized_kernel<&pick_unary>(), specialized_kernel<&pick_unary_backward>()};

}  // namespace encore::cpu
