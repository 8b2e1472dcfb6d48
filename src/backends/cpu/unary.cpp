// The CPU kernels of elementwise unary math and of its fused backward
// (contracts: UnaryArgs in src/backends/kernel_table.h). The element formulas
// are src/backends/unary_math.h, shared with CUDA, except for the ops that
// call exp, log, tanh, erf or pow: those run in blocks through vec_math.h's
// vector functions (NOTE [ Blocked transcendentals ] below).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "src/backends/cpu/dispatch.h"
#include "src/backends/cpu/loops.h"
#include "src/backends/cpu/parallel.h"
#include "src/backends/cpu/simd.h"
#include "src/backends/cpu/vec_math.h"
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

// The same loops when the output is the (first) input's buffer: a consuming
// op writing into its operand, or a backward into the gradient it was given
// (NOTE [ Writing into a dying temporary ] in src/ops/op_utils.h). One
// pointer for both, so nothing restrict-qualified aliases and the loops stay
// as wide as the others; each element is read before it is written.
template <typename T, UnaryOp kOp>
ENCORE_SIMD_CLONES void unary_run_in_place(T* __restrict o, int64_t n, compute_t<T> p0, compute_t<T> p1) {
  using C = compute_t<T>;
  for (int64_t i = 0; i < n; ++i) o[i] = T(unary_fn<kOp>(C(o[i]), p0, p1));
}

template <typename T, UnaryOp kOp>
ENCORE_SIMD_CLONES void unary_backward_run_in_place(T* __restrict o, const T* __restrict s, int64_t n,
                                                    compute_t<T> p0, compute_t<T> p1) {
  using C = compute_t<T>;
  for (int64_t i = 0; i < n; ++i) o[i] = T(unary_grad_fn<kOp>(C(o[i]), C(s[i]), p0, p1));
}

// NOTE [ Blocked transcendentals ]
// Which loop computes exp(x) in GELU-erf, sigmoid, silu, pow, ...? glibc's
// expf and erff are scalar calls (the exact GELU's forward took 1.9 ms of a
// transformer block's step, its backward 3.1 ms). The float ops that need
// them run here in blocks of kBlock elements: the inner argument of the
// transcendental is computed into a scratch block (a flat loop, cloned per
// x86-64 level), the block goes through vec_math.h (SLEEF, 1 ulp; the exact
// GELU: vec_erf_fast, 4 ulp), and a second flat loop finishes the formula.
// f16/bf16 and strided operands are gathered into float blocks first and
// scattered after, so every layout and
// every chunking gives an element the same bits (NOTE [ Deterministic
// vector math ] in vec_math.h). pow takes shortcuts for the exponents
// 0, 1, 2, 3, 0.5, -0.5, -1 and -2 (x*x, sqrt(x), 1/x, ... like PyTorch's
// pow; at -0 and -inf sqrt's sign rules differ from std::pow's, as there),
// in its forward and its backward; any other exponent calls SLEEF's pow. CUDA keeps unary_math.h's libm formulas (tolerances, not bits, hold
// the two together there).
constexpr int64_t kBlock = 512;

constexpr bool uses_vec_math(UnaryOp op) {
  return op == UnaryOp::kExp || op == UnaryOp::kLog || op == UnaryOp::kTanh || op == UnaryOp::kSigmoid ||
         op == UnaryOp::kGeluErf || op == UnaryOp::kSilu || op == UnaryOp::kPow;
}
constexpr bool backward_uses_vec_math(UnaryOp op) {
  return op == UnaryOp::kGeluErf || op == UnaryOp::kSilu || op == UnaryOp::kPow;
}

// The flat loops around the vector calls: o[i] = f(a[i], b[i]), p a scalar.
enum class Step {
  kNeg,           // -a
  kScale,         // a * p
  kNegHalfSq,     // -0.5 * a * a
  kRecipOnePlus,  // 1 / (1 + b)              sigmoid from b = exp(-x)
  kSiluOut,       // a / (1 + b)              silu from b = exp(-x)
  kGeluErfOut,    // 0.5 * a * (1 + b)        b = erf(x / sqrt 2)
  kMulScale,      // a * p * b                pow's backward: g * p * x^(p-1)
  kSquare, kCube, kSqrt, kRsqrt, kRecip, kRecipSq,
  kTwiceMul,      // a * 2 * b                pow 2 backward: g * 2 * x
  kThriceSq,      // a * 3 * (b * b)          pow 3 backward
  kHalfOverSqrt,  // a * 0.5 / sqrt(b)        pow 0.5 backward
  kRsqrtGrad,     // a * -0.5 / (b * sqrt(b)) pow -0.5 backward
  kRecipGrad,     // -a / (b * b)             pow -1 backward
  kRecipSqGrad,   // a * -2 / (b * b * b)     pow -2 backward
  kFill,          // p
};

template <Step kS>
ENCORE_SIMD_INLINE float step_fn(float a, float b, float p) {
  if constexpr (kS == Step::kNeg) return -a;
  else if constexpr (kS == Step::kScale) return a * p;
  else if constexpr (kS == Step::kNegHalfSq) return -0.5f * a * a;
  else if constexpr (kS == Step::kRecipOnePlus) return 1.0f / (1.0f + b);
  else if constexpr (kS == Step::kSiluOut) return a / (1.0f + b);
  else if constexpr (kS == Step::kGeluErfOut) return 0.5f * a * (1.0f + b);
  else if constexpr (kS == Step::kMulScale) return a * p * b;
  else if constexpr (kS == Step::kSquare) return a * a;
  else if constexpr (kS == Step::kCube) return a * a * a;
  else if constexpr (kS == Step::kSqrt) return __builtin_sqrtf(a);
  else if constexpr (kS == Step::kRsqrt) return 1.0f / __builtin_sqrtf(a);
  else if constexpr (kS == Step::kRecip) return 1.0f / a;
  else if constexpr (kS == Step::kRecipSq) return 1.0f / (a * a);
  else if constexpr (kS == Step::kTwiceMul) return a * 2.0f * b;
  else if constexpr (kS == Step::kThriceSq) return a * 3.0f * (b * b);
  else if constexpr (kS == Step::kHalfOverSqrt) return a * 0.5f / __builtin_sqrtf(b);
  else if constexpr (kS == Step::kRsqrtGrad) return a * -0.5f / (b * __builtin_sqrtf(b));
  else if constexpr (kS == Step::kRecipGrad) return -a / (b * b);
  else if constexpr (kS == Step::kRecipSqGrad) return a * -2.0f / (b * b * b);
  else if constexpr (kS == Step::kFill) return p;
}

template <Step kS>
ENCORE_SIMD_CLONES void step_run(float* o, const float* a, const float* b, int64_t n, float p) {
  for (int64_t i = 0; i < n; ++i) o[i] = step_fn<kS>(a[i], b ? b[i] : 0.0f, p);
}

// GELU's backward from its pieces: o = g (0.5 (1 + t) + s (k u)), t =
// erf(s / sqrt 2), u = exp(-s^2 / 2), k = 1 / sqrt(2 pi). A clone of its
// own: four inputs, and as plain code it ran at the baseline (SSE2) width.
ENCORE_SIMD_CLONES void gelu_erf_grad_run(float* __restrict o, const float* g, const float* s, const float* t,
                                          const float* u, int64_t n) {
  const float k = float(kInvSqrt2Pi);
  for (int64_t i = 0; i < n; ++i) o[i] = g[i] * (0.5f * (1.0f + t[i]) + s[i] * (k * u[i]));
}
// o is also g (a backward writing into its gradient's buffer).
ENCORE_SIMD_CLONES void gelu_erf_grad_run_in_place(float* __restrict o, const float* s, const float* t,
                                                   const float* u, int64_t n) {
  const float k = float(kInvSqrt2Pi);
  for (int64_t i = 0; i < n; ++i) o[i] = o[i] * (0.5f * (1.0f + t[i]) + s[i] * (k * u[i]));
}

void copy_block(float* o, const float* x, int64_t n) {
  if (o != x) std::memcpy(o, x, sizeof(float) * n);
}

// pow's exponent, sorted into its shortcuts once per launch.
enum class PowCase { kZero, kOne, kSquare, kCube, kSqrt, kRsqrt, kRecip, kRecipSq, kGeneral };
PowCase pow_case(float p) {
  if (p == 0.0f) return PowCase::kZero;
  if (p == 1.0f) return PowCase::kOne;
  if (p == 2.0f) return PowCase::kSquare;
  if (p == 3.0f) return PowCase::kCube;
  if (p == 0.5f) return PowCase::kSqrt;
  if (p == -0.5f) return PowCase::kRsqrt;
  if (p == -1.0f) return PowCase::kRecip;
  if (p == -2.0f) return PowCase::kRecipSq;
  return PowCase::kGeneral;
}

// o = op(x) over one block; t is scratch of n floats.
template <UnaryOp kOp>
void forward_block(float* o, const float* x, float* t, int64_t n, float p0) {
  if constexpr (kOp == UnaryOp::kExp) vec_exp(o, x, n);
  else if constexpr (kOp == UnaryOp::kLog) vec_log(o, x, n);
  else if constexpr (kOp == UnaryOp::kTanh) vec_tanh(o, x, n);
  else if constexpr (kOp == UnaryOp::kSigmoid || kOp == UnaryOp::kSilu) {
    step_run<Step::kNeg>(t, x, nullptr, n, 0);
    vec_exp(t, t, n);
    if constexpr (kOp == UnaryOp::kSigmoid) step_run<Step::kRecipOnePlus>(o, x, t, n, 0);
    else step_run<Step::kSiluOut>(o, x, t, n, 0);
  } else if constexpr (kOp == UnaryOp::kGeluErf) {
    step_run<Step::kScale>(t, x, nullptr, n, float(kInvSqrt2));
    vec_erf_fast(t, t, n);
    step_run<Step::kGeluErfOut>(o, x, t, n, 0);
  } else if constexpr (kOp == UnaryOp::kPow) {
    switch (pow_case(p0)) {
      case PowCase::kZero: return step_run<Step::kFill>(o, x, nullptr, n, 1.0f);
      case PowCase::kOne: return copy_block(o, x, n);
      case PowCase::kSquare: return step_run<Step::kSquare>(o, x, nullptr, n, 0);
      case PowCase::kCube: return step_run<Step::kCube>(o, x, nullptr, n, 0);
      case PowCase::kSqrt: return step_run<Step::kSqrt>(o, x, nullptr, n, 0);
      case PowCase::kRsqrt: return step_run<Step::kRsqrt>(o, x, nullptr, n, 0);
      case PowCase::kRecip: return step_run<Step::kRecip>(o, x, nullptr, n, 0);
      case PowCase::kRecipSq: return step_run<Step::kRecipSq>(o, x, nullptr, n, 0);
      case PowCase::kGeneral: return vec_pow(o, x, p0, n);
    }
  }
}

// o = g * op'(s) over one block; t, u are scratch of n floats.
template <UnaryOp kOp>
void backward_block(float* o, const float* g, const float* s, float* t, float* u, int64_t n, float p0) {
  if constexpr (kOp == UnaryOp::kSilu) {
    step_run<Step::kNeg>(t, s, nullptr, n, 0);
    vec_exp(t, t, n);
    step_run<Step::kRecipOnePlus>(t, s, t, n, 0);   // sigmoid(s)
    for (int64_t i = 0; i < n; ++i) o[i] = g[i] * t[i] * (1.0f + s[i] * (1.0f - t[i]));
  } else if constexpr (kOp == UnaryOp::kGeluErf) {
    step_run<Step::kScale>(t, s, nullptr, n, float(kInvSqrt2));
    vec_erf_fast(t, t, n);
    step_run<Step::kNegHalfSq>(u, s, nullptr, n, 0);
    vec_exp(u, u, n);
    if (o == g) {
      gelu_erf_grad_run_in_place(o, s, t, u, n);
    } else {
      gelu_erf_grad_run(o, g, s, t, u, n);
    }
  } else if constexpr (kOp == UnaryOp::kPow) {
    switch (pow_case(p0)) {
      case PowCase::kZero: return step_run<Step::kFill>(o, g, nullptr, n, 0.0f);
      case PowCase::kOne: return copy_block(o, g, n);
      case PowCase::kSquare: return step_run<Step::kTwiceMul>(o, g, s, n, 0);
      case PowCase::kCube: return step_run<Step::kThriceSq>(o, g, s, n, 0);
      case PowCase::kSqrt: return step_run<Step::kHalfOverSqrt>(o, g, s, n, 0);
      case PowCase::kRsqrt: return step_run<Step::kRsqrtGrad>(o, g, s, n, 0);
      case PowCase::kRecip: return step_run<Step::kRecipGrad>(o, g, s, n, 0);
      case PowCase::kRecipSq: return step_run<Step::kRecipSqGrad>(o, g, s, n, 0);
      case PowCase::kGeneral:
        vec_pow(t, s, p0 - 1.0f, n);
        return step_run<Step::kMulScale>(o, g, t, n, p0);
    }
  }
}

// n elements of T from src, `stride` bytes apart, into floats; a fill where
// they are one broadcast value (the gradient of a mean or sum, stride 0:
// gathered element by element it took pow's backward in the transformer
// block 1.4 ns an element, issue 19).
template <typename T>
void gather_run(float* dst, const char* src, int64_t stride, int64_t n) {
  if (stride == 0) {
    std::fill_n(dst, n, static_cast<float>(*reinterpret_cast<const T*>(src)));
  } else {
    for (int64_t j = 0; j < n; ++j) dst[j] = static_cast<float>(*reinterpret_cast<const T*>(src + j * stride));
  }
}

template <typename T>
void scatter_run(char* dst, int64_t stride, const float* src, int64_t n) {
  for (int64_t j = 0; j < n; ++j) *reinterpret_cast<T*>(dst + j * stride) = T(src[j]);
}

// Runs block(float* out, const float* const* in, scratch, n) over layout l
// in blocks of kBlock (operand 0 the output, N - 1 inputs of type T),
// in parallel above `grain` elements, a run along the innermost dim at a
// time: dense f32 operands and output in place, the others (16-bit,
// strided, broadcast) gathered into float blocks and the output scattered
// back.
template <typename T, int N, typename F>
void for_each_block(const Layout<N>& l, int64_t grain, F&& block) {
  constexpr int kIn = N - 1;
  parallel_for(l.numel, grain, [&](int64_t b, int64_t e) {
    alignas(64) float in[kIn][kBlock], out[kBlock], scratch[2][kBlock];
    for (int64_t s = b; s < e; s += kBlock) {
      const int64_t n = std::min(kBlock, e - s);
      if (std::is_same_v<T, float> && l.contiguous) {   // one dense run: no run to find
        const float* ins[kIn];
        for (int k = 0; k < kIn; ++k) ins[k] = reinterpret_cast<const float*>(l.ptr[k + 1]) + s;
        block(reinterpret_cast<float*>(l.ptr[0]) + s, ins, scratch, n);
        continue;
      }
      // A run at a time (an element's bits do not depend on where a block
      // starts or ends): dense f32 operands in place, the rest gathered.
      for_each_run(l, s, s + n, [&](char** p, int64_t run) {
        constexpr bool kF32 = std::is_same_v<T, float>;
        const float* ins[kIn];
        for (int k = 0; k < kIn; ++k) {
          const int64_t stride = l.stride[k + 1][l.ndim - 1];
          if (kF32 && stride == sizeof(float)) {
            ins[k] = reinterpret_cast<const float*>(p[k + 1]);
          } else {
            gather_run<T>(in[k], p[k + 1], stride, run);
            ins[k] = in[k];
          }
        }
        const bool dense_out = kF32 && l.stride[0][l.ndim - 1] == sizeof(float);
        block(dense_out ? reinterpret_cast<float*>(p[0]) : out, ins, scratch, run);
        if (!dense_out) scatter_run<T>(p[0], l.stride[0][l.ndim - 1], out, run);
      });
    }
  });
}

// Operands out, a.
template <typename T, UnaryOp kOp>
void unary_loop(const Layout<2>& l, compute_t<T> p0, compute_t<T> p1) {
  using C = compute_t<T>;
  if constexpr (std::is_same_v<C, float> && uses_vec_math(kOp)) {
    return for_each_block<T>(l, grain_of(kOp), [p0](float* o, const float* const* in, float (*t)[kBlock], int64_t n) {
      forward_block<kOp>(o, in[0], t[0], n, p0);
    });
  }
  parallel_for(l.numel, grain_of(kOp), [&](int64_t b, int64_t e) {
    if (l.contiguous && l.ptr[0] == l.ptr[1]) {
      unary_run_in_place<T, kOp>(reinterpret_cast<T*>(l.ptr[0]) + b, e - b, p0, p1);
    } else if (l.contiguous) {
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
  if constexpr (std::is_same_v<C, float> && backward_uses_vec_math(kOp)) {
    return for_each_block<T>(l, grain_of(kOp), [p0](float* o, const float* const* in, float (*t)[kBlock], int64_t n) {
      backward_block<kOp>(o, in[0], in[1], t[0], t[1], n, p0);
    });
  }
  parallel_for(l.numel, grain_of(kOp), [&](int64_t b, int64_t e) {
    if (l.contiguous && l.ptr[0] == l.ptr[1]) {
      unary_backward_run_in_place<T, kOp>(reinterpret_cast<T*>(l.ptr[0]) + b, reinterpret_cast<const T*>(l.ptr[2]) + b,
                                          e - b, p0, p1);
    } else if (l.contiguous) {
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
