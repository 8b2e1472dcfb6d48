#include "src/backends/cpu/binary.h"

#include "src/backends/cpu/dispatch.h"
#include "src/backends/cpu/loops.h"
#include "src/backends/cpu/parallel.h"
#include "src/core/stream.h"

namespace encore::cpu {
namespace {

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

struct BinaryArgs { Layout<3> l; double alpha; };
struct ScalarArgs { Layout<2> l; double s; };

template <typename T, BinaryOp kOp>
void binary_kernel(const BinaryArgs& a) {
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
void scalar_kernel(const ScalarArgs& a) {
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

constexpr const char* kBinaryNames[] = {"add", "sub", "mul", "div"};
constexpr const char* kScalarNames[] = {"add_scalar", "mul_scalar", "rsub_scalar", "rdiv_scalar"};

template <typename T, BinaryOp kOp>
void launch_binary(const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  BinaryArgs args{make_layout<3>(out, {&a, &b}), alpha};
  current_stream(kCPU).launch<&binary_kernel<T, kOp>>(kBinaryNames[static_cast<int>(kOp)], args,
                                                      {a.storage(), b.storage()}, {out.storage()});
}

template <typename T, ScalarOp kOp>
void launch_scalar(const Tensor& out, const Tensor& a, double s) {
  ScalarArgs args{make_layout<2>(out, {&a}), s};
  current_stream(kCPU).launch<&scalar_kernel<T, kOp>>(kScalarNames[static_cast<int>(kOp)], args,
                                                      {a.storage()}, {out.storage()});
}

}  // namespace

// ---- launchers ----

void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  dispatch_numeric(out.dtype(), kBinaryNames[static_cast<int>(op)], [&](auto tag) {
    using T = typename decltype(tag)::type;
    switch (op) {
      case BinaryOp::kAdd: return launch_binary<T, BinaryOp::kAdd>(out, a, b, alpha);
      case BinaryOp::kSub: return launch_binary<T, BinaryOp::kSub>(out, a, b, alpha);
      case BinaryOp::kMul: return launch_binary<T, BinaryOp::kMul>(out, a, b, alpha);
      case BinaryOp::kDiv: return launch_binary<T, BinaryOp::kDiv>(out, a, b, alpha);
    }
  });
}

void binary_scalar(ScalarOp op, const Tensor& out, const Tensor& a, double s) {
  dispatch_numeric(out.dtype(), kScalarNames[static_cast<int>(op)], [&](auto tag) {
    using T = typename decltype(tag)::type;
    switch (op) {
      case ScalarOp::kAdd: return launch_scalar<T, ScalarOp::kAdd>(out, a, s);
      case ScalarOp::kMul: return launch_scalar<T, ScalarOp::kMul>(out, a, s);
      case ScalarOp::kRsub: return launch_scalar<T, ScalarOp::kRsub>(out, a, s);
      case ScalarOp::kRdiv: return launch_scalar<T, ScalarOp::kRdiv>(out, a, s);
    }
  });
}

}  // namespace encore::cpu
