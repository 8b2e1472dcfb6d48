// The element formulas of the unary ops, forward and backward, written once
// for both backends: the CPU's loops (cpu/unary.cpp) and the CUDA kernels
// (cuda/unary.cu) call these same functions, so the two run one source;
// except that the CPU runs exp, log, tanh, sigmoid, silu, GELU-erf and pow
// (and the backward of the last three) through SLEEF's vector functions in
// blocks (NOTE [ Blocked transcendentals ] in cpu/unary.cpp). Also
// the host helpers both backends' kernel entries use: the runtime op as a
// template argument, and the op's scalars in the compute type. nvcc-safe:
// no Abseil, no tensor types.
//
//   const float y = unary_fn<UnaryOp::kTanh>(x, 0.f, 0.f);            // tanh(x)
//   const float dx = unary_grad_fn<UnaryOp::kTanh>(dy, y, 0.f, 0.f);   // dy * (1 - y^2)
//
// C is the compute type: float (also for f16/bf16 storage) or, for abs, relu
// and clamp, int32_t/int64_t. The CPU's results are the reference: the host
// compiles these exactly as the CPU's own loops did (glibc's expf, tanhf, ...,
// every float operation rounded: -ffp-contract=off), always inlined so that
// the loops still vectorize. On the device, hd:: maps each libm call to
// CUDA's (its last bits may differ from glibc: NOTE [ CUDA tolerances ] in
// tests/backends/cuda_test_util.h) and unary.cu compiles with --fmad=false
// (src/meson.build), so +, -, * and / round as on the CPU: everything
// without a libm call (abs, relu, clamp, sqrt, rsqrt, f32 GELU-tanh) gives
// the CPU's bits.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "src/backends/hd_math.h"
#include "src/backends/op_kinds.h"
#include "src/core/host_device.h"

namespace encore::backend {

// ---- element functions ----

inline constexpr double kSqrt2OverPi = 0.7978845608028654;   // sqrt(2/pi)
inline constexpr double kGeluCubic = 0.044715;
inline constexpr double kInvSqrt2 = 0.7071067811865476;      // 1/sqrt(2)
inline constexpr double kInvSqrt2Pi = 0.3989422804014327;    // 1/sqrt(2 pi)

// tanh inside GELU: a rational approximation (Eigen's coefficients for single
// precision, |error| < 4e-7 (3 ulp of 1) on the clamped range; beyond it tanh
// is +-1 in f32) with no call and no branch, so the CPU's flat loops
// vectorize; std::tanh is a scalar libm call that took 45% of a transformer
// block's training step.
ENCORE_HOST_DEVICE_INLINE float gelu_inner_tanh(float u) {
  // Clamp |u| on the bit pattern (integer order = float order for |u|): a
  // float compare would stop GCC vectorizing under -ftrapping-math. NaN
  // clamps too; GELU's factor x keeps it NaN.
  const uint32_t bits = hd::float_bits(u);
  const uint32_t clamp = hd::float_bits(7.90531110763549805f);
  const uint32_t mag = hd::min(bits & 0x7fffffffu, clamp);
  const float x = hd::bits_float(mag | (bits & 0x80000000u));
  const float x2 = x * x;
  float p = -2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 + -8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  float q = 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  return x * p / q;
}

template <typename C>
ENCORE_HOST_DEVICE_INLINE C abs_value(C x) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;   // -INT_MIN wraps to INT_MIN instead of overflowing
    return x < 0 ? static_cast<C>(U{0} - static_cast<U>(x)) : x;
  } else {
    return hd::abs(x);
  }
}

// op(x); p0, p1: the op's scalars (pow: the exponent p0; clamp: [p0, p1]).
template <UnaryOp kOp, typename C>
ENCORE_HOST_DEVICE_INLINE C unary_fn(C x, C p0, C p1) {
  if constexpr (kOp == UnaryOp::kExp) return hd::exp(x);
  else if constexpr (kOp == UnaryOp::kLog) return hd::log(x);
  else if constexpr (kOp == UnaryOp::kSqrt) return hd::sqrt(x);
  else if constexpr (kOp == UnaryOp::kRsqrt) return C(1) / hd::sqrt(x);
  else if constexpr (kOp == UnaryOp::kPow) return p0 == C(2) ? x * x : hd::pow(x, p0);
  else if constexpr (kOp == UnaryOp::kAbs) return abs_value(x);
  else if constexpr (kOp == UnaryOp::kTanh) return hd::tanh(x);
  else if constexpr (kOp == UnaryOp::kSigmoid) return C(1) / (C(1) + hd::exp(-x));  // exp overflow gives 0, not NaN
  else if constexpr (kOp == UnaryOp::kRelu) return x < C(0) ? C(0) : x;              // NaN propagates
  else if constexpr (kOp == UnaryOp::kGeluTanh) {
    const C inner = C(kSqrt2OverPi) * (x + C(kGeluCubic) * x * x * x);
    return C(0.5) * x * (C(1) + gelu_inner_tanh(inner));
  } else if constexpr (kOp == UnaryOp::kGeluErf) return C(0.5) * x * (C(1) + hd::erf(x * C(kInvSqrt2)));
  else if constexpr (kOp == UnaryOp::kSilu) return x / (C(1) + hd::exp(-x));
  else if constexpr (kOp == UnaryOp::kClamp) return x < p0 ? p0 : (x > p1 ? p1 : x);   // NaN propagates
}

// d(op)/dx times g; s is the saved forward output y or input x
// (unary_saves_output in op_kinds.h). Floats only.
template <UnaryOp kOp, typename C>
ENCORE_HOST_DEVICE_INLINE C unary_grad_fn(C g, C s, C p0, C p1) {
  if constexpr (kOp == UnaryOp::kExp) return g * s;
  else if constexpr (kOp == UnaryOp::kLog) return g / s;
  else if constexpr (kOp == UnaryOp::kSqrt) return g * C(0.5) / s;
  else if constexpr (kOp == UnaryOp::kRsqrt) return C(-0.5) * g * s * s * s;
  else if constexpr (kOp == UnaryOp::kPow) return p0 == C(0) ? C(0) : g * p0 * hd::pow(s, p0 - C(1));
  else if constexpr (kOp == UnaryOp::kAbs) return s > C(0) ? g : (s < C(0) ? -g : C(0));
  else if constexpr (kOp == UnaryOp::kTanh) return g * (C(1) - s * s);
  else if constexpr (kOp == UnaryOp::kSigmoid) return g * s * (C(1) - s);
  else if constexpr (kOp == UnaryOp::kRelu) return s > C(0) ? g : C(0);
  else if constexpr (kOp == UnaryOp::kGeluTanh) {
    const C x2 = s * s;
    const C t = gelu_inner_tanh(C(kSqrt2OverPi) * (s + C(kGeluCubic) * x2 * s));
    const C dinner = C(kSqrt2OverPi) * (C(1) + C(3 * kGeluCubic) * x2);
    return g * (C(0.5) * (C(1) + t) + C(0.5) * s * (C(1) - t * t) * dinner);
  } else if constexpr (kOp == UnaryOp::kGeluErf) {
    const C cdf = C(0.5) * (C(1) + hd::erf(s * C(kInvSqrt2)));
    const C pdf = C(kInvSqrt2Pi) * hd::exp(C(-0.5) * s * s);
    return g * (cdf + s * pdf);
  } else if constexpr (kOp == UnaryOp::kSilu) {
    const C sig = C(1) / (C(1) + hd::exp(-s));
    return g * sig * (C(1) + s * (C(1) - sig));
  } else if constexpr (kOp == UnaryOp::kClamp) return s >= p0 && s <= p1 ? g : C(0);   // PyTorch: bounds inclusive
}

// ---- host helpers of the kernel entries ----

// Calls f(std::integral_constant<UnaryOp, op>{}): the runtime op as a template argument.
template <int K = 0, typename F>
void visit_unary_op(UnaryOp op, F&& f) {
  if constexpr (K < kUnaryOpCount) {
    constexpr UnaryOp kOp = static_cast<UnaryOp>(K);
    if (op == kOp) return f(std::integral_constant<UnaryOp, kOp>{});
    return visit_unary_op<K + 1>(op, std::forward<F>(f));
  }
}

// A unary op's scalar (UnaryArgs::p0/p1, a double) in compute type C.
// Integer bounds are clipped to C's range first (double -> integer outside
// the range is undefined behaviour); the op layer has checked that they are
// whole numbers or infinite.
template <typename C>
C unary_param(double v) {
  if constexpr (std::is_integral_v<C>) {
    constexpr C lo = std::numeric_limits<C>::lowest(), hi = std::numeric_limits<C>::max();
    if (v <= static_cast<double>(lo)) return lo;
    if (v >= static_cast<double>(hi)) return hi;   // double(INT64_MAX) rounds up to 2^63: caught here
    return static_cast<C>(v);
  } else {
    return static_cast<C>(v);
  }
}

}  // namespace encore::backend
