// The CPU kernels of the optimizers (contracts: kernels.h, "optim"; argument
// structs: kernel_table.h): SGD and AdamW updates, the step counter, and the
// three kernels of global gradient-norm clipping. The element arithmetic is
// src/backends/optim_math.h, shared with CUDA.
#include <algorithm>
#include <cmath>
#include <tuple>
#include <type_traits>
#include <utility>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "src/backends/cpu/dispatch.h"
#include "src/backends/cpu/loops.h"
#include "src/backends/cpu/parallel.h"
#include "src/backends/cpu/simd.h"
#include "src/backends/kernel_table.h"
#include "src/backends/optim_math.h"

namespace encore::cpu {
namespace {

using namespace backend;   // the shared argument structs, kinds and formulas

// ---- loop helper ----

// Calls f(Ts&... elements) for every element of layout l, in parallel above
// `grain` elements. Dense operands get a flat indexed loop the compiler can
// vectorize; others walk their strides.
template <typename... Ts, typename F, size_t... I>
void flat_loop(const char* const* ptr, int64_t b, int64_t e, F& f, std::index_sequence<I...>) {
  std::tuple<Ts*...> p{reinterpret_cast<Ts*>(const_cast<char*>(ptr[I]))...};
  for (int64_t i = b; i < e; ++i) f(std::get<I>(p)[i]...);
}

template <typename... Ts, typename F, int N, size_t... I>
void strided_loop(const Layout<N>& l, int64_t b, int64_t e, F& f, std::index_sequence<I...>) {
  for_each_element(l, b, e, [&](char** q) { f(*reinterpret_cast<Ts*>(q[I])...); });
}

template <typename... Ts, int N, typename F>
void for_each_typed(const Layout<N>& l, int64_t grain, F f) {
  static_assert(sizeof...(Ts) == N, "one element type per operand");
  parallel_for(l.numel, grain, [&](int64_t b, int64_t e) {
    if (l.contiguous) {
      flat_loop<Ts...>(l.ptr, b, e, f, std::index_sequence_for<Ts...>{});
    } else {
      strided_loop<Ts...>(l, b, e, f, std::index_sequence_for<Ts...>{});
    }
  });
}

// ---- SGD (NOTE [ SGD arithmetic ] in src/backends/optim_math.h) ----

enum class SgdMode { kPlain, kMomentum, kNesterov };

using namespace backend;   // the shared argument structs, kinds and formulas

// Dense f32 elements [0, n): param p, grad g and, with momentum, buf; one
// clone per x86-64 level, restrict pointers so each clone vectorizes at its
// full width (NOTE [ SGD arithmetic ]: element by element, so every clone and
// every split over threads gives the same bits).
template <SgdMode kMode, bool kDecay>
ENCORE_SIMD_CLONES void sgd_dense_f32(float* __restrict p, const float* __restrict g, float* __restrict buf,
                                      int64_t n, float lr, float mu, float wd) {
  for (int64_t i = 0; i < n; ++i) {
    const float d = kDecay ? sgd_direction(p[i], g[i], wd) : g[i];
    if constexpr (kMode == SgdMode::kPlain) {
      p[i] = sgd_apply(p[i], lr, d);
    } else {
      p[i] = sgd_apply(p[i], lr, sgd_momentum(d, buf[i], mu, kMode == SgdMode::kNesterov));
    }
  }
}

// Operands param, grad (T) and, with momentum, the f32 buffer.
template <typename T, SgdMode kMode, int N>
void sgd_loop(const Layout<N>& l, float lr, float mu, float wd) {
  if constexpr (std::is_same_v<T, float>) {
    if (l.contiguous) {
      float* p = reinterpret_cast<float*>(l.ptr[0]);
      const float* g = reinterpret_cast<const float*>(l.ptr[1]);
      float* buf = kMode == SgdMode::kPlain ? nullptr : reinterpret_cast<float*>(l.ptr[N - 1]);
      parallel_for(l.numel, kGrainElementwise, [=](int64_t b, int64_t e) {
        float* bb = buf != nullptr ? buf + b : nullptr;
        if (wd == 0.0f) {
          sgd_dense_f32<kMode, false>(p + b, g + b, bb, e - b, lr, mu, wd);
        } else {
          sgd_dense_f32<kMode, true>(p + b, g + b, bb, e - b, lr, mu, wd);
        }
      });
      return;
    }
  }
  // Captures by value: through references the compiler must assume every
  // store to p may change lr, and the loops would not vectorise.
  if constexpr (kMode == SgdMode::kPlain) {
    for_each_typed<T, const T>(l, kGrainElementwise, [lr, wd](T& p, const T& g) {
      const float x = static_cast<float>(p);
      p = T(sgd_apply(x, lr, sgd_direction(x, static_cast<float>(g), wd)));
    });
  } else {
    for_each_typed<T, const T, float>(l, kGrainElementwise, [lr, mu, wd](T& p, const T& g, float& buf) {
      const float x = static_cast<float>(p);
      const float d = sgd_direction(x, static_cast<float>(g), wd);
      p = T(sgd_apply(x, lr, sgd_momentum(d, buf, mu, kMode == SgdMode::kNesterov)));
    });
  }
}

// Operands 0 and 1 of a layout (plain SGD: operand 2 repeats the parameter).
Layout<2> first_two(const Layout<3>& l) {
  Layout<2> out;
  out.ndim = l.ndim;
  out.numel = l.numel;
  out.contiguous = l.contiguous;
  for (int k = 0; k < 2; ++k) out.ptr[k] = l.ptr[k];
  for (int d = 0; d < l.ndim; ++d) {
    out.shape[d] = l.shape[d];
    for (int k = 0; k < 2; ++k) out.stride[k][d] = l.stride[k][d];
  }
  return out;
}

// ---- AdamW (NOTE [ AdamW arithmetic ] in src/backends/optim_math.h) ----

using backend::adamw_element;

template <typename A>   // AdamWArgs or AdamWManyArgs: lr, step, beta1, beta2, eps, weight_decay
AdamWCoefs adamw_coefs(const A& a) {
  // Step-dependent values come from device memory, never from the host.
  return backend::adamw_coefs(*a.lr, *a.step, a.beta1, a.beta2, a.eps, a.weight_decay);
}

// The vector paths below are adamw_element in SSE and AVX-512 lanes: the
// same IEEE operations in the same order (no fused multiply-add), so they
// give its bits.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// GCC contracts a * b + c into an FMA, even across intrinsics, wherever the
// target has one (AVX-512 implies FMA): fp-contract=off keeps NOTE [ AdamW
// arithmetic ] exact.
#define ENCORE_NO_FMA __attribute__((optimize("fp-contract=off")))

// 4 lanes of SSE (every x86-64), the tail element by element.
ENCORE_NO_FMA void adamw_dense_sse(const AdamWCoefs& c, float* __restrict p, const float* __restrict g,
                                   float* __restrict m, float* __restrict v, int64_t n) {
  const __m128 decay = _mm_set1_ps(c.decay), b1 = _mm_set1_ps(c.b1), c1 = _mm_set1_ps(c.c1);
  const __m128 b2 = _mm_set1_ps(c.b2), c2 = _mm_set1_ps(c.c2), step = _mm_set1_ps(c.step_size);
  const __m128 rs2 = _mm_set1_ps(c.inv_sqrt_bias2), eps = _mm_set1_ps(c.eps);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m128 gi = _mm_loadu_ps(g + i);
    const __m128 mi = _mm_add_ps(_mm_mul_ps(b1, _mm_loadu_ps(m + i)), _mm_mul_ps(c1, gi));
    const __m128 vi = _mm_add_ps(_mm_mul_ps(b2, _mm_loadu_ps(v + i)), _mm_mul_ps(_mm_mul_ps(c2, gi), gi));
    const __m128 denom = _mm_add_ps(_mm_mul_ps(_mm_sqrt_ps(vi), rs2), eps);
    const __m128 pi = _mm_sub_ps(_mm_mul_ps(_mm_loadu_ps(p + i), decay), _mm_div_ps(_mm_mul_ps(step, mi), denom));
    _mm_storeu_ps(m + i, mi);
    _mm_storeu_ps(v + i, vi);
    _mm_storeu_ps(p + i, pi);
  }
  for (; i < n; ++i) adamw_element(c, p[i], g[i], m[i], v[i]);
}

// 16 lanes of AVX-512; the tail is one masked iteration.
__attribute__((target("avx512f"))) ENCORE_NO_FMA void adamw_dense_avx512(
    const AdamWCoefs& c, float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
    int64_t n) {
  const __m512 decay = _mm512_set1_ps(c.decay), b1 = _mm512_set1_ps(c.b1), c1 = _mm512_set1_ps(c.c1);
  const __m512 b2 = _mm512_set1_ps(c.b2), c2 = _mm512_set1_ps(c.c2), step = _mm512_set1_ps(c.step_size);
  const __m512 rs2 = _mm512_set1_ps(c.inv_sqrt_bias2), eps = _mm512_set1_ps(c.eps);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 gi = _mm512_maskz_loadu_ps(k, g + i);
    const __m512 mi = _mm512_add_ps(_mm512_mul_ps(b1, _mm512_maskz_loadu_ps(k, m + i)), _mm512_mul_ps(c1, gi));
    const __m512 vi =
        _mm512_add_ps(_mm512_mul_ps(b2, _mm512_maskz_loadu_ps(k, v + i)), _mm512_mul_ps(_mm512_mul_ps(c2, gi), gi));
    const __m512 denom = _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_sqrt_ps(k, vi), rs2), eps);
    const __m512 pi = _mm512_sub_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + i), decay),
                                    _mm512_div_ps(_mm512_mul_ps(step, mi), denom));
    _mm512_mask_storeu_ps(m + i, k, mi);
    _mm512_mask_storeu_ps(v + i, k, vi);
    _mm512_mask_storeu_ps(p + i, k, pi);
  }
}
#else
// Dense f32 operands [0, n), one element at a time.
void adamw_dense_scalar(const AdamWCoefs& c, float* __restrict p, const float* __restrict g, float* __restrict m,
                        float* __restrict v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) adamw_element(c, p[i], g[i], m[i], v[i]);
}
#endif

using AdamWDenseFn = void (*)(const AdamWCoefs&, float*, const float*, float*, float*, int64_t);

// The widest path this CPU runs, chosen once.
AdamWDenseFn adamw_dense_fn() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  static const AdamWDenseFn fn = __builtin_cpu_supports("avx512f") ? &adamw_dense_avx512 : &adamw_dense_sse;
  return fn;
#else
  return &adamw_dense_scalar;
#endif
}

// Operands param, grad (T), exp_avg, exp_avg_sq (f32).
template <typename T>
void adamw_loop(const AdamWArgs& a) {
  const AdamWCoefs c = adamw_coefs(a);
  if constexpr (std::is_same_v<T, float>) {
    if (a.l.contiguous) {
      float* p = reinterpret_cast<float*>(a.l.ptr[0]);
      const float* g = reinterpret_cast<const float*>(a.l.ptr[1]);
      float* m = reinterpret_cast<float*>(a.l.ptr[2]);
      float* v = reinterpret_cast<float*>(a.l.ptr[3]);
      const AdamWDenseFn dense = adamw_dense_fn();
      parallel_for(a.l.numel, kGrainTranscendental,
                   [&](int64_t b, int64_t e) { dense(c, p + b, g + b, m + b, v + b, e - b); });
      return;
    }
  }
  for_each_typed<T, const T, float, float>(a.l, kGrainTranscendental,
                                           [&c](T& param, const T& grad, float& m, float& v) {
    float p = static_cast<float>(param);
    adamw_element(c, p, static_cast<float>(grad), m, v);
    param = T(p);   // f16/bf16: rounded once, on store
  });
}

// Elements [b, e) of one table entry.
template <typename T>
void adamw_entry_range(const AdamWCoefs& c, const AdamWEntry& e, int64_t b, int64_t end) {
  T* p = reinterpret_cast<T*>(e.p);
  const T* g = reinterpret_cast<const T*>(e.g);
  if constexpr (std::is_same_v<T, float>) {
    adamw_dense_fn()(c, p + b, g + b, e.m + b, e.v + b, end - b);
  } else {
    for (int64_t i = b; i < end; ++i) {
      float x = static_cast<float>(p[i]);
      adamw_element(c, x, static_cast<float>(g[i]), e.m[i], e.v[i]);
      p[i] = T(x);   // f16/bf16: rounded once, on store
    }
  }
}

// Every parameter of the table in one launch: the same element operations
// as adamw_loop's dense path, so the bits equal per-parameter launches. The
// threads split the table's elements end to end (one parallel region, not
// one per parameter: a transformer block's dozen small tensors left the
// second thread idle).
template <typename T>
void adamw_many_loop(const AdamWManyArgs& a) {
  const AdamWCoefs c = adamw_coefs(a);
  int64_t total = 0;
  for (int64_t k = 0; k < a.count; ++k) total += a.table[k].numel;
  parallel_for(total, kGrainTranscendental, [&](int64_t b, int64_t e) {
    int64_t base = 0;   // index of entry k's first element in the table's order
    for (int64_t k = 0; k < a.count && base < e; base += a.table[k].numel, ++k) {
      const int64_t lo = std::max(b, base), hi = std::min(e, base + a.table[k].numel);
      if (lo < hi) adamw_entry_range<T>(c, a.table[k], lo - base, hi - base);
    }
  });
}

// ---- step counter ----

void increment_kernel(const IncrementArgs& a) { *a.counter += 1; }

// ---- gradient-norm clipping ----

// Fixed chunks (not per thread) keep the summation order, and so the result,
// independent of the thread count.
constexpr int64_t kMaxChunks = 64;

// Sum of x^2 over dense x[b, e), in double. Independent accumulators let the
// compiler vectorize without reassociating (the order stays fixed).
// f32: the same order with the eight lanes as one F64x8 (simd.h), one clone
// per x86-64 level (a zmm register under AVX-512; the plain loop below stayed
// SSE).
ENCORE_SIMD_CLONES double sum_of_squares_f32(const float* x, int64_t b, int64_t e) {
  F64x8 acc = {};
  int64_t i = b;
  for (; i + 8 <= e; i += 8) {
    const F64x8 v = __builtin_convertvector(load_f32x8(x + i), F64x8);
    acc += v * v;
  }
  double s = 0.0;
  for (; i < e; ++i) {
    const double v = x[i];
    s += v * v;
  }
  for (int j = 0; j < 8; ++j) s += acc[j];
  return s;
}

template <typename T>
double sum_of_squares_dense(const T* x, int64_t b, int64_t e) {
  if constexpr (std::is_same_v<T, float>) return sum_of_squares_f32(x, b, e);
  constexpr int kLanes = 8;
  double acc[kLanes] = {};
  int64_t i = b;
  for (; i + kLanes <= e; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const double v = static_cast<float>(x[i + j]);
      acc[j] += v * v;
    }
  }
  double s = 0.0;
  for (; i < e; ++i) {
    const double v = static_cast<float>(x[i]);
    s += v * v;
  }
  for (double lane : acc) s += lane;
  return s;
}

template <typename T>
void sum_of_squares_loop(const SumSquaresArgs& a) {
  const int64_t n = a.l.numel;
  const int64_t chunks = std::clamp<int64_t>((n + kGrainElementwise - 1) / kGrainElementwise, 1, kMaxChunks);
  const int64_t size = (n + chunks - 1) / chunks;
  double partial[kMaxChunks] = {};
  parallel_for(chunks, 1, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) {
      double s = 0.0;
      const int64_t b = std::min(n, c * size), e = std::min(n, b + size);
      if (a.l.contiguous) {
        s = sum_of_squares_dense(reinterpret_cast<const T*>(a.l.ptr[0]), b, e);
      } else {
        for_each_element(a.l, b, e, [&](char** q) {
          const double x = static_cast<float>(*reinterpret_cast<const T*>(q[0]));
          s += x * x;
        });
      }
      partial[c] = s;
    }
  });
  double total = 0.0;
  for (int64_t c = 0; c < chunks; ++c) total += partial[c];
  *a.out = static_cast<float>(std::sqrt(total));   // the root fits f32 where the sum may not
}

void clip_coefficient_kernel(const ClipCoefArgs& a) {
  double total = 0.0;
  for (int64_t i = 0; i < a.n; ++i) total += static_cast<double>(a.partial[i]) * a.partial[i];
  const double norm = std::sqrt(total);
  *a.norm = static_cast<float>(norm);
  // Same epsilon as PyTorch's clip_grad_norm_; NaN stays NaN (no write later).
  const double coef = a.max_norm / (norm + 1e-6);
  *a.scale = static_cast<float>((coef < 1.0 || std::isnan(coef)) ? coef : 1.0);
}

template <typename T>
void scale_loop(const ScaleInPlaceArgs& a) {
  const float s = *a.scale;
  if (!(s < 1.0f)) return;   // 1 (below max_norm) or NaN: leave the values as they are
  for_each_typed<T>(a.l, kGrainElementwise, [s](T& x) { x = T(static_cast<float>(x) * s); });
}

// ---- kernel table entries: the runtime dtype picked once per launch ----
// (NOTE [ Specialized kernels ] in src/core/kernel.h: a replay calls the typed entry directly)

template <typename T>
struct SgdEntry {
  static void run(const SgdArgs& a) {
    if (!a.has_momentum) return sgd_loop<T, SgdMode::kPlain>(first_two(a.l), *a.lr, a.momentum, a.weight_decay);
    if (a.nesterov) return sgd_loop<T, SgdMode::kNesterov>(a.l, *a.lr, a.momentum, a.weight_decay);
    sgd_loop<T, SgdMode::kMomentum>(a.l, *a.lr, a.momentum, a.weight_decay);
  }
};

template <typename T>
struct AdamWStepEntry {
  static void run(const AdamWArgs& a) {
    adamw_loop<T>(a);
  }
};

template <typename T>
struct AdamWManyStepEntry {
  static void run(const AdamWManyArgs& a) {
    adamw_many_loop<T>(a);
  }
};

template <typename T>
struct SumOfSquaresEntry {
  static void run(const SumSquaresArgs& a) {
    sum_of_squares_loop<T>(a);
  }
};

template <typename T>
struct ScaleInPlaceEntry {
  static void run(const ScaleInPlaceArgs& a) {
    scale_loop<T>(a);
  }
};

}  // namespace

extern const OptimKernels kOptim = {
    .sgd = specialized_kernel<&pick_float<SgdEntry, SgdArgs>>(),
    .adamw = specialized_kernel<&pick_float<AdamWStepEntry, AdamWArgs>>(),
    .adamw_many = specialized_kernel<&pick_float<AdamWManyStepEntry, AdamWManyArgs>>(),
    .increment = kernel<&increment_kernel>(),
    .sum_of_squares_blocks = nullptr,   // one pass over fixed chunks, no scratch
    .sum_of_squares = specialized_kernel<&pick_float<SumOfSquaresEntry, SumSquaresArgs>>(),
    .clip_coefficient = kernel<&clip_coefficient_kernel>(),
    .scale_in_place = specialized_kernel<&pick_float<ScaleInPlaceEntry, ScaleInPlaceArgs>>(),
};

}  // namespace encore::cpu
