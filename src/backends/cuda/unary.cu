// CUDA kernels for elementwise unary math and the fused backward of each
// unary op (contracts: UnaryArgs in src/backends/kernel_table.h). Kernels,
// then launchers. The element formulas are the CPU's own
// (src/backends/unary_math.h); this file compiles with --fmad=false
// (src/meson.build), so only CUDA's libm calls (expf, tanhf, erff, powf)
// may differ from glibc in the last bits (NOTE [ CUDA tolerances ] in
// tests/backends/cuda_test_util.h). Integer abs/relu/clamp are exact.
#include <type_traits>

#include "src/backends/cuda/elementwise.cuh"
#include "src/backends/kernel_table.h"
#include "src/backends/unary_math.h"

namespace encore::cuda {
namespace {

using namespace backend;   // the shared argument structs, kinds and formulas

// ---- kernels ----

template <typename T, UnaryOp kOp>
struct UnaryFn {   // operands out, a
  compute_t<T> p0, p1;
  __device__ void operator()(char* const* p) const {
    store<T>(p[0], backend::unary_fn<kOp>(load<T>(p[1]), p0, p1));
  }
};

template <typename T, UnaryOp kOp>
struct UnaryBackwardFn {   // operands grad_in, g, saved
  float p0, p1;
  __device__ void operator()(char* const* p) const {
    store<T>(p[0], backend::unary_grad_fn<kOp>(load<T>(p[1]), load<T>(p[2]), p0, p1));
  }
};

// ---- launchers ----

void unary_launch(const UnaryArgs& a) {
  visit_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    if constexpr (!std::is_same_v<T, bool>) {
      backend::visit_unary_op(a.op, [&](auto k) {
        constexpr UnaryOp kOp = decltype(k)::value;
        if constexpr (!std::is_integral_v<T> || backend::unary_supports_integers(kOp)) {   // the host refused the rest
          launch_elementwise(a.l, UnaryFn<T, kOp>{unary_param<C>(a.p0), unary_param<C>(a.p1)},
                             kUnaryNames[static_cast<int>(kOp)]);
        }
      });
    }
  });
}

void unary_backward_launch(const UnaryBackwardArgs& a) {
  visit_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_half_v<T> || std::is_same_v<T, float>) {
      backend::visit_unary_op(a.op, [&](auto k) {
        constexpr UnaryOp kOp = decltype(k)::value;
        launch_elementwise(a.l, UnaryBackwardFn<T, kOp>{unary_param<float>(a.p0), unary_param<float>(a.p1)},
                           kUnaryBackwardNames[static_cast<int>(kOp)]);
      });
    }
  });
}

}  // namespace

extern const UnaryKernels kUnary = {kernel<&unary_launch>(), kernel<&unary_backward_launch>()};

}  // namespace encore::cuda
