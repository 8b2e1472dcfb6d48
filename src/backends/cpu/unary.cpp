#include "src/backends/cpu/unary.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "src/backends/cpu/dispatch.h"
#include "src/backends/cpu/loops.h"
#include "src/backends/cpu/parallel.h"
#include "src/backends/cpu/simd.h"
#include "src/core/stream.h"

namespace encore::cpu {
namespace {

using backend::kUnaryNames;
using backend::kUnaryOpCount;
constexpr const auto& kBackwardNames = backend::kUnaryBackwardNames;
constexpr bool supports_integers(UnaryOp op) { return backend::unary_supports_integers(op); }

// Cheap ops split work in bigger chunks than transcendental ones.
constexpr int64_t grain_of(UnaryOp op) {
  return op == UnaryOp::kAbs || op == UnaryOp::kRelu || op == UnaryOp::kClamp || op == UnaryOp::kSqrt ||
                 op == UnaryOp::kRsqrt
             ? kGrainElementwise
             : kGrainTranscendental;
}

// ---- element functions (C: the compute type, float or an integer) ----

constexpr double kSqrt2OverPi = 0.7978845608028654;   // sqrt(2/pi)
constexpr double kGeluCubic = 0.044715;
constexpr double kInvSqrt2 = 0.7071067811865476;      // 1/sqrt(2)
constexpr double kInvSqrt2Pi = 0.3989422804014327;    // 1/sqrt(2 pi)

// tanh inside GELU. f32: a rational approximation (Eigen's coefficients for
// single precision, |error| < 4e-7 (3 ulp of 1) on the clamped range; beyond it tanh is
// +-1 in f32) with no call and no branch, so the flat loops vectorize;
// std::tanh is a scalar libm call that took 45% of a transformer block's
// training step. f64 keeps std::tanh.
template <typename C>
ENCORE_SIMD_INLINE C gelu_inner_tanh(C u) {
  if constexpr (std::is_same_v<C, float>) {
    // Clamp |u| on the bit pattern (integer order = float order for |u|): a
    // float compare would stop GCC vectorizing under -ftrapping-math. NaN
    // clamps too; GELU's factor x keeps it NaN.
    const uint32_t bits = std::bit_cast<uint32_t>(u);
    const uint32_t clamp = std::bit_cast<uint32_t>(7.90531110763549805f);
    const uint32_t mag = std::min(bits & 0x7fffffffu, clamp);
    const float x = std::bit_cast<float>(mag | (bits & 0x80000000u));
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
  } else {
    return std::tanh(u);
  }
}

template <typename C>
ENCORE_SIMD_INLINE C abs_value(C x) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;   // -INT_MIN wraps to INT_MIN instead of overflowing
    return x < 0 ? static_cast<C>(U{0} - static_cast<U>(x)) : x;
  } else {
    return std::abs(x);
  }
}

template <UnaryOp kOp, typename C>
ENCORE_SIMD_INLINE C unary_fn(C x, C p0, C p1) {
  if constexpr (kOp == UnaryOp::kExp) return std::exp(x);
  if constexpr (kOp == UnaryOp::kLog) return std::log(x);
  if constexpr (kOp == UnaryOp::kSqrt) return std::sqrt(x);
  if constexpr (kOp == UnaryOp::kRsqrt) return C(1) / std::sqrt(x);
  if constexpr (kOp == UnaryOp::kPow) return p0 == C(2) ? x * x : std::pow(x, p0);
  if constexpr (kOp == UnaryOp::kAbs) return abs_value(x);
  if constexpr (kOp == UnaryOp::kTanh) return std::tanh(x);
  if constexpr (kOp == UnaryOp::kSigmoid) return C(1) / (C(1) + std::exp(-x));   // exp overflow gives 0, not NaN
  if constexpr (kOp == UnaryOp::kRelu) return x < C(0) ? C(0) : x;               // NaN propagates
  if constexpr (kOp == UnaryOp::kGeluTanh) {
    const C inner = C(kSqrt2OverPi) * (x + C(kGeluCubic) * x * x * x);
    return C(0.5) * x * (C(1) + gelu_inner_tanh(inner));
  }
  if constexpr (kOp == UnaryOp::kGeluErf) return C(0.5) * x * (C(1) + std::erf(x * C(kInvSqrt2)));
  if constexpr (kOp == UnaryOp::kSilu) return x / (C(1) + std::exp(-x));
  if constexpr (kOp == UnaryOp::kClamp) return x < p0 ? p0 : (x > p1 ? p1 : x);   // NaN propagates
}

// d(op)/dx times g; s is the saved forward output y or input x (see unary.h).
template <UnaryOp kOp, typename C>
ENCORE_SIMD_INLINE C unary_grad_fn(C g, C s, C p0, C p1) {
  if constexpr (kOp == UnaryOp::kExp) return g * s;
  if constexpr (kOp == UnaryOp::kLog) return g / s;
  if constexpr (kOp == UnaryOp::kSqrt) return g * C(0.5) / s;
  if constexpr (kOp == UnaryOp::kRsqrt) return C(-0.5) * g * s * s * s;
  if constexpr (kOp == UnaryOp::kPow) return p0 == C(0) ? C(0) : g * p0 * std::pow(s, p0 - C(1));
  if constexpr (kOp == UnaryOp::kAbs) return s > C(0) ? g : (s < C(0) ? -g : C(0));
  if constexpr (kOp == UnaryOp::kTanh) return g * (C(1) - s * s);
  if constexpr (kOp == UnaryOp::kSigmoid) return g * s * (C(1) - s);
  if constexpr (kOp == UnaryOp::kRelu) return s > C(0) ? g : C(0);
  if constexpr (kOp == UnaryOp::kGeluTanh) {
    const C x2 = s * s;
    const C t = gelu_inner_tanh(C(kSqrt2OverPi) * (s + C(kGeluCubic) * x2 * s));
    const C dinner = C(kSqrt2OverPi) * (C(1) + C(3 * kGeluCubic) * x2);
    return g * (C(0.5) * (C(1) + t) + C(0.5) * s * (C(1) - t * t) * dinner);
  }
  if constexpr (kOp == UnaryOp::kGeluErf) {
    const C cdf = C(0.5) * (C(1) + std::erf(s * C(kInvSqrt2)));
    const C pdf = C(kInvSqrt2Pi) * std::exp(C(-0.5) * s * s);
    return g * (cdf + s * pdf);
  }
  if constexpr (kOp == UnaryOp::kSilu) {
    const C sig = C(1) / (C(1) + std::exp(-s));
    return g * sig * (C(1) + s * (C(1) - sig));
  }
  if constexpr (kOp == UnaryOp::kClamp) return s >= p0 && s <= p1 ? g : C(0);   // PyTorch: bounds inclusive
}

// ---- kernels ----

// p0/p1 are already in the compute type (integer clamp bounds clipped on the host).
template <typename C> struct UnaryArgs { Layout<2> l; C p0, p1; };           // out, a
template <typename C> struct UnaryBackwardArgs { Layout<3> l; C p0, p1; };   // grad_in, g, saved

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

template <typename T, UnaryOp kOp>
void unary_kernel(const UnaryArgs<compute_t<T>>& a) {
  using C = compute_t<T>;
  const Layout<2>& l = a.l;
  const C p0 = a.p0, p1 = a.p1;
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

template <typename T, UnaryOp kOp>
void unary_backward_kernel(const UnaryBackwardArgs<compute_t<T>>& a) {
  using C = compute_t<T>;
  const Layout<3>& l = a.l;
  const C p0 = a.p0, p1 = a.p1;
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

// ---- dispatch helpers ----

// Calls f(std::integral_constant<UnaryOp, op>{}): turns the runtime op into a template argument.
template <int K = 0, typename F>
void visit_op(UnaryOp op, F&& f) {
  if constexpr (K < kUnaryOpCount) {
    constexpr UnaryOp kOp = static_cast<UnaryOp>(K);
    if (op == kOp) return f(std::integral_constant<UnaryOp, kOp>{});
    return visit_op<K + 1>(op, std::forward<F>(f));
  }
}

// A host scalar in compute type C. Integer bounds are clipped to C's range
// first (double -> integer outside the range is undefined behaviour).
template <typename C>
C to_compute(double v) {
  if constexpr (std::is_integral_v<C>) {
    constexpr C lo = std::numeric_limits<C>::lowest(), hi = std::numeric_limits<C>::max();
    if (v <= static_cast<double>(lo)) return lo;
    if (v >= static_cast<double>(hi)) return hi;   // double(INT64_MAX) rounds up to 2^63: caught here
    return static_cast<C>(v);
  } else {
    return static_cast<C>(v);
  }
}

}  // namespace

// ---- launchers ----

void unary(UnaryOp op, const Tensor& out, const Tensor& a, double p0, double p1) {
  const char* name = kUnaryNames[static_cast<int>(op)];
  dispatch_numeric(a.dtype(), name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    visit_op(op, [&](auto k) {
      constexpr UnaryOp kOp = decltype(k)::value;
      if constexpr (std::is_integral_v<T> && !supports_integers(kOp)) {
        throw_error(absl::StatusCode::kInvalidArgument,
                    absl::StrFormat("%s: needs a float tensor (f32, f16, bf16), got %s %s", name,
                                    shape_str(a.shape()), dtype_name(a.dtype())));
      } else {
        UnaryArgs<C> args{make_layout<2>(out, {&a}), to_compute<C>(p0), to_compute<C>(p1)};
        current_stream(kCPU).launch<&unary_kernel<T, kOp>>(name, args, {a.storage()}, {out.storage()});
      }
    });
  });
}

void unary_backward(UnaryOp op, const Tensor& grad_in, const Tensor& g, const Tensor& saved, double p0,
                    double p1) {
  const char* name = kBackwardNames[static_cast<int>(op)];
  dispatch_float(saved.dtype(), name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    visit_op(op, [&](auto k) {
      constexpr UnaryOp kOp = decltype(k)::value;
      UnaryBackwardArgs<C> args{make_layout<3>(grad_in, {&g, &saved}), to_compute<C>(p0), to_compute<C>(p1)};
      current_stream(kCPU).launch<&unary_backward_kernel<T, kOp>>(name, args, {g.storage(), saved.storage()},
                                                                  {grad_in.storage()});
    });
  });
}

}  // namespace encore::cpu
