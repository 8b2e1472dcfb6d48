// CUDA kernels for elementwise unary math and the fused backward of each
// unary op. Kernels, then launchers. The formulas are the CPU's
// (src/backends/cpu/unary.cpp) in the same order; CUDA's libm (expf, tanhf,
// erff, powf) may differ from glibc in the last bits (NOTE [ CUDA tolerances ]
// in tests/backends/cuda_test_util.h). Integer abs/relu/clamp are exact.
#include <limits>
#include <type_traits>

#include "src/backends/cuda/elementwise.cuh"
#include "src/backends/cuda/unary_launch.h"

namespace encore::cuda {
namespace {

using backend::UnaryOp;

using backend::kUnaryNames;
using backend::kUnaryOpCount;
constexpr const auto& kBackwardNames = backend::kUnaryBackwardNames;
constexpr bool supports_integers(UnaryOp op) { return backend::unary_supports_integers(op); }

constexpr float kSqrt2OverPi = 0.7978845608028654f;   // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;
constexpr float kGeluCubic3 = static_cast<float>(3 * 0.044715);
constexpr float kInvSqrt2 = 0.7071067811865476f;      // 1/sqrt(2)
constexpr float kInvSqrt2Pi = 0.3989422804014327f;    // 1/sqrt(2 pi)

// ---- element functions (C: float, or an integer for abs/relu/clamp) ----

template <typename C>
__device__ __forceinline__ C abs_value(C x) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;   // -INT_MIN wraps to INT_MIN instead of overflowing
    return x < 0 ? static_cast<C>(U{0} - static_cast<U>(x)) : x;
  } else {
    return fabsf(x);
  }
}

template <UnaryOp kOp, typename C>
__device__ __forceinline__ C unary_fn(C x, C p0, C p1) {
  if constexpr (kOp == UnaryOp::kAbs) return abs_value(x);
  else if constexpr (kOp == UnaryOp::kRelu) return x < C(0) ? C(0) : x;               // NaN propagates
  else if constexpr (kOp == UnaryOp::kClamp) return x < p0 ? p0 : (x > p1 ? p1 : x);   // NaN propagates
  else if constexpr (kOp == UnaryOp::kExp) return expf(x);
  else if constexpr (kOp == UnaryOp::kLog) return logf(x);
  else if constexpr (kOp == UnaryOp::kSqrt) return sqrtf(x);
  else if constexpr (kOp == UnaryOp::kRsqrt) return __fdiv_rn(1.0f, sqrtf(x));
  else if constexpr (kOp == UnaryOp::kPow) return p0 == 2.0f ? __fmul_rn(x, x) : powf(x, p0);
  else if constexpr (kOp == UnaryOp::kTanh) return tanhf(x);
  else if constexpr (kOp == UnaryOp::kSigmoid) return 1.0f / (1.0f + expf(-x));   // exp overflow gives 0, not NaN
  else if constexpr (kOp == UnaryOp::kGeluTanh) {
    const float inner = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
    return 0.5f * x * (1.0f + tanhf(inner));
  } else if constexpr (kOp == UnaryOp::kGeluErf) {
    return 0.5f * x * (1.0f + erff(x * kInvSqrt2));
  } else if constexpr (kOp == UnaryOp::kSilu) {
    return x / (1.0f + expf(-x));
  }
}

// d(op)/dx times g; s is the saved forward output y or input x (unary_saves_output).
template <UnaryOp kOp>
__device__ __forceinline__ float unary_grad_fn(float g, float s, float p0, float p1) {
  if constexpr (kOp == UnaryOp::kExp) return g * s;
  else if constexpr (kOp == UnaryOp::kLog) return g / s;
  else if constexpr (kOp == UnaryOp::kSqrt) return g * 0.5f / s;
  else if constexpr (kOp == UnaryOp::kRsqrt) return -0.5f * g * s * s * s;
  else if constexpr (kOp == UnaryOp::kPow) return p0 == 0.0f ? 0.0f : g * p0 * powf(s, p0 - 1.0f);
  else if constexpr (kOp == UnaryOp::kAbs) return s > 0.0f ? g : (s < 0.0f ? -g : 0.0f);
  else if constexpr (kOp == UnaryOp::kTanh) return g * (1.0f - s * s);
  else if constexpr (kOp == UnaryOp::kSigmoid) return g * s * (1.0f - s);
  else if constexpr (kOp == UnaryOp::kRelu) return s > 0.0f ? g : 0.0f;
  else if constexpr (kOp == UnaryOp::kGeluTanh) {
    const float x2 = s * s;
    const float t = tanhf(kSqrt2OverPi * (s + kGeluCubic * x2 * s));
    const float dinner = kSqrt2OverPi * (1.0f + kGeluCubic3 * x2);
    return g * (0.5f * (1.0f + t) + 0.5f * s * (1.0f - t * t) * dinner);
  } else if constexpr (kOp == UnaryOp::kGeluErf) {
    const float cdf = 0.5f * (1.0f + erff(s * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * expf(-0.5f * s * s);
    return g * (cdf + s * pdf);
  } else if constexpr (kOp == UnaryOp::kSilu) {
    const float sig = 1.0f / (1.0f + expf(-s));
    return g * sig * (1.0f + s * (1.0f - sig));
  } else if constexpr (kOp == UnaryOp::kClamp) {
    return s >= p0 && s <= p1 ? g : 0.0f;   // PyTorch: bounds inclusive
  }
}

// ---- kernels ----

template <typename T, UnaryOp kOp>
struct UnaryFn {   // operands out, a
  compute_t<T> p0, p1;
  __device__ void operator()(char* const* p) const { store<T>(p[0], unary_fn<kOp>(load<T>(p[1]), p0, p1)); }
};

template <typename T, UnaryOp kOp>
struct UnaryBackwardFn {   // operands grad_in, g, saved
  float p0, p1;
  __device__ void operator()(char* const* p) const {
    store<T>(p[0], unary_grad_fn<kOp>(load<T>(p[1]), load<T>(p[2]), p0, p1));
  }
};

// ---- host helpers ----

// Calls f(std::integral_constant<UnaryOp, op>{}): the runtime op as a template argument.
template <int K = 0, typename F>
void visit_op(UnaryOp op, F&& f) {
  if constexpr (K < kUnaryOpCount) {
    constexpr UnaryOp kOp = static_cast<UnaryOp>(K);
    if (op == kOp) return f(std::integral_constant<UnaryOp, kOp>{});
    return visit_op<K + 1>(op, static_cast<F&&>(f));
  }
}

// A host scalar in compute type C; integer bounds clipped to C's range first,
// exactly as the CPU's to_compute.
template <typename C>
C to_compute(double v) {
  if constexpr (std::is_integral_v<C>) {
    constexpr C lo = std::numeric_limits<C>::lowest(), hi = std::numeric_limits<C>::max();
    if (v <= static_cast<double>(lo)) return lo;
    if (v >= static_cast<double>(hi)) return hi;
    return static_cast<C>(v);
  } else {
    return static_cast<C>(v);
  }
}

}  // namespace

// ---- launchers ----

void unary_launch(const UnaryArgs& a) {
  visit_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    if constexpr (!std::is_same_v<T, bool>) {
      visit_op(a.op, [&](auto k) {
        constexpr UnaryOp kOp = decltype(k)::value;
        if constexpr (!std::is_integral_v<T> || supports_integers(kOp)) {   // the host refused the rest
          launch_elementwise(a.l, UnaryFn<T, kOp>{to_compute<C>(a.p0), to_compute<C>(a.p1)},
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
      visit_op(a.op, [&](auto k) {
        constexpr UnaryOp kOp = decltype(k)::value;
        launch_elementwise(a.l, UnaryBackwardFn<T, kOp>{static_cast<float>(a.p0), static_cast<float>(a.p1)},
                           kBackwardNames[static_cast<int>(kOp)]);
      });
    }
  });
}

}  // namespace encore::cuda
