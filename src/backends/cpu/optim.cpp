#include "src/backends/cpu/optim.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <type_traits>
#include <utility>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "src/backends/adamw_coefs.h"
#include "src/backends/cpu/dispatch.h"
#include "src/backends/optim_table.h"
#include "src/backends/cpu/loops.h"
#include "src/backends/cpu/parallel.h"
#include "src/backends/optim_checks.h"
#include "src/core/stream.h"

namespace encore::cpu {
namespace {

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

// ---- SGD ----

enum class SgdMode { kPlain, kMomentum, kNesterov };

// Operands: param, grad (T), and for kMomentum/kNesterov the f32 buffer.
template <int N>
struct SgdArgs {
  Layout<N> l;
  const float* lr;   // device scalar: read at every launch
  float momentum, weight_decay;
};

template <typename T, SgdMode kMode>
void sgd_kernel(const SgdArgs<kMode == SgdMode::kPlain ? 2 : 3>& a) {
  const float lr = *a.lr, mu = a.momentum, wd = a.weight_decay;
  auto direction = [wd](const T& p, const T& g) {
    float d = static_cast<float>(g);
    if (wd != 0.0f) d += wd * static_cast<float>(p);   // PyTorch adds the L2 term only when wd != 0
    return d;
  };
  if constexpr (kMode == SgdMode::kPlain && std::is_same_v<T, float>) {
    if (a.l.contiguous) {   // dense f32: restrict pointers let the loop vectorise
      float* __restrict p = reinterpret_cast<float*>(a.l.ptr[0]);
      const float* __restrict g = reinterpret_cast<const float*>(a.l.ptr[1]);
      parallel_for(a.l.numel, kGrainElementwise, [=](int64_t b, int64_t e) {
        if (wd == 0.0f) {
          for (int64_t i = b; i < e; ++i) p[i] = p[i] - lr * g[i];
        } else {
          for (int64_t i = b; i < e; ++i) p[i] = p[i] - lr * (g[i] + wd * p[i]);
        }
      });
      return;
    }
  }
  // Captures by value: through references the compiler must assume every
  // store to p may change lr, and the loops would not vectorise.
  if constexpr (kMode == SgdMode::kPlain) {
    for_each_typed<T, const T>(a.l, kGrainElementwise, [lr, direction](T& p, const T& g) {
      p = T(static_cast<float>(p) - lr * direction(p, g));
    });
  } else {
    // buf starts at 0, so the first step gives buf = d exactly (PyTorch clones d).
    for_each_typed<T, const T, float>(a.l, kGrainElementwise, [lr, mu, direction](T& p, const T& g, float& buf) {
      const float d = direction(p, g);
      buf = mu * buf + d;
      const float update = kMode == SgdMode::kNesterov ? d + mu * buf : buf;
      p = T(static_cast<float>(p) - lr * update);
    });
  }
}

// ---- AdamW ----

// Operands: param, grad (T), exp_avg, exp_avg_sq (f32).
struct AdamWArgs {
  Layout<4> l;
  const float* lr;      // device scalar: the learning rate of this step
  const int64_t* step;  // device scalar: t, already counting this step (t >= 1)
  float beta1, beta2, eps, weight_decay;
};

using backend::AdamWCoefs;

template <typename A>   // AdamWArgs or AdamWManyArgs: lr, step, beta1, beta2, eps, weight_decay
AdamWCoefs adamw_coefs(const A& a) {
  // Step-dependent values come from device memory, never from the host.
  return backend::adamw_coefs(*a.lr, *a.step, a.beta1, a.beta2, a.eps, a.weight_decay);
}

// NOTE [ AdamW arithmetic ]: one element of the update, PyTorch's AdamW in
// f32 with the bias corrections folded into two per-step constants (as
// PyTorch's own kernels do):
//   p = p * (1 - lr wd);  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g
//   p = p - (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// One sqrt and one division per element. The vector paths below perform
// exactly these IEEE operations in this order (no fused multiply-add), so
// every path gives the same bits, whatever the ISA, the chunking or the
// position of an element in a vector.
inline void adamw_element(const AdamWCoefs& c, float& p, float g, float& m, float& v) {
  m = c.b1 * m + c.c1 * g;                       // first moment: running mean of g
  v = c.b2 * v + c.c2 * g * g;                   // second moment: running mean of g^2
  const float denom = std::sqrt(v) * c.inv_sqrt_bias2 + c.eps;
  p = p * c.decay - c.step_size * m / denom;     // step of about lr per element
}

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

template <typename T>
void adamw_kernel(const AdamWArgs& a) {
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

// Operands: the rows of a backend::AdamWEntry table (dense arrays).
struct AdamWManyArgs {
  const backend::AdamWEntry* table;
  int64_t count;
  const float* lr;
  const int64_t* step;
  float beta1, beta2, eps, weight_decay;
};

// Every parameter of the table in one launch: the same element operations
// as adamw_kernel's dense path, so the bits equal per-parameter launches.
template <typename T>
void adamw_many_kernel(const AdamWManyArgs& a) {
  const AdamWCoefs c = adamw_coefs(a);
  for (int64_t k = 0; k < a.count; ++k) {
    const backend::AdamWEntry& e = a.table[k];
    T* p = reinterpret_cast<T*>(e.p);
    const T* g = reinterpret_cast<const T*>(e.g);
    if constexpr (std::is_same_v<T, float>) {
      const AdamWDenseFn dense = adamw_dense_fn();
      parallel_for(e.numel, kGrainTranscendental,
                   [&](int64_t b, int64_t end) { dense(c, p + b, g + b, e.m + b, e.v + b, end - b); });
    } else {
      parallel_for(e.numel, kGrainTranscendental, [&](int64_t b, int64_t end) {
        for (int64_t i = b; i < end; ++i) {
          float x = static_cast<float>(p[i]);
          adamw_element(c, x, static_cast<float>(g[i]), e.m[i], e.v[i]);
          p[i] = T(x);   // f16/bf16: rounded once, on store
        }
      });
    }
  }
}

// ---- step counter ----

struct IncrementArgs { int64_t* counter; };

void increment_kernel(const IncrementArgs& a) { *a.counter += 1; }

// ---- gradient-norm clipping ----

// Fixed chunks (not per thread) keep the summation order, and so the result,
// independent of the thread count.
constexpr int64_t kMaxChunks = 64;

struct SumSquaresArgs { Layout<1> l; float* out; };

// Sum of x^2 over dense x[b, e), in double. Independent accumulators let the
// compiler vectorize without reassociating (the order stays fixed).
template <typename T>
double sum_of_squares_dense(const T* x, int64_t b, int64_t e) {
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
void sum_of_squares_kernel(const SumSquaresArgs& a) {
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
  *a.out = static_cast<float>(total);
}

struct ClipCoefArgs { const float* partial; int64_t n; float* norm; float* scale; double max_norm; };

void clip_coefficient_kernel(const ClipCoefArgs& a) {
  double total = 0.0;
  for (int64_t i = 0; i < a.n; ++i) total += a.partial[i];
  const double norm = std::sqrt(total);
  *a.norm = static_cast<float>(norm);
  // Same epsilon as PyTorch's clip_grad_norm_; NaN stays NaN (no write later).
  const double coef = a.max_norm / (norm + 1e-6);
  *a.scale = static_cast<float>((coef < 1.0 || std::isnan(coef)) ? coef : 1.0);
}

struct ScaleArgs { Layout<1> l; const float* scale; };

template <typename T>
void scale_kernel(const ScaleArgs& a) {
  const float s = *a.scale;
  if (!(s < 1.0f)) return;   // 1 (below max_norm) or NaN: leave the values as they are
  for_each_typed<T>(a.l, kGrainElementwise, [s](T& x) { x = T(static_cast<float>(x) * s); });
}

}  // namespace

// ---- launchers ----

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf, const Tensor& lr,
                double momentum, bool nesterov, double weight_decay) {
  backend::check_like("sgd", param, grad, param.dtype(), "grad");
  backend::check_scalar("sgd", lr, kFloat32, "lr", DeviceType::kCPU);
  const float mu = static_cast<float>(momentum), wd = static_cast<float>(weight_decay);
  Stream& stream = current_stream(kCPU);
  dispatch_float(param.dtype(), "sgd", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (!momentum_buf.defined()) {
      SgdArgs<2> args{make_layout<2>(param, {&grad}), lr.data<float>(), mu, wd};
      stream.launch<&sgd_kernel<T, SgdMode::kPlain>>("sgd", args, {param.storage(), grad.storage(), lr.storage()},
                                                      {param.storage()});
      return;
    }
    backend::check_like("sgd", param, momentum_buf, kFloat32, "momentum buffer");
    SgdArgs<3> args{make_layout<3>(param, {&grad, &momentum_buf}), lr.data<float>(), mu, wd};
    std::initializer_list<Storage*> reads = {param.storage(), grad.storage(), momentum_buf.storage(),
                                             lr.storage()};
    if (nesterov) {
      stream.launch<&sgd_kernel<T, SgdMode::kNesterov>>("sgd", args, reads,
                                                         {param.storage(), momentum_buf.storage()});
    } else {
      stream.launch<&sgd_kernel<T, SgdMode::kMomentum>>("sgd", args, reads,
                                                         {param.storage(), momentum_buf.storage()});
    }
  });
}

void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const Tensor& lr, const Tensor& step, double beta1, double beta2, double eps,
                  double weight_decay) {
  backend::check_like("adamw", param, grad, param.dtype(), "grad");
  backend::check_like("adamw", param, exp_avg, kFloat32, "exp_avg");
  backend::check_like("adamw", param, exp_avg_sq, kFloat32, "exp_avg_sq");
  backend::check_scalar("adamw", lr, kFloat32, "lr", DeviceType::kCPU);
  backend::check_scalar("adamw", step, kInt64, "step", DeviceType::kCPU);
  AdamWArgs args{make_layout<4>(param, {&grad, &exp_avg, &exp_avg_sq}), lr.data<float>(), step.data<int64_t>(),
                 static_cast<float>(beta1), static_cast<float>(beta2), static_cast<float>(eps),
                 static_cast<float>(weight_decay)};
  dispatch_float(param.dtype(), "adamw", [&](auto tag) {
    using T = typename decltype(tag)::type;
    current_stream(kCPU).launch<&adamw_kernel<T>>(
        "adamw", args,
        {param.storage(), grad.storage(), exp_avg.storage(), exp_avg_sq.storage(), lr.storage(), step.storage()},
        {param.storage(), exp_avg.storage(), exp_avg_sq.storage()});
  });
}

void adamw_update_many(const Tensor& table, int64_t count, int64_t total, DType dtype,
                       absl::Span<Storage* const> reads, absl::Span<Storage* const> writes, const Tensor& lr,
                       const Tensor& step, double beta1, double beta2, double eps, double weight_decay) {
  backend::check_adamw_table(table, count, DeviceType::kCPU);
  backend::check_scalar("adamw", lr, kFloat32, "lr", DeviceType::kCPU);
  backend::check_scalar("adamw", step, kInt64, "step", DeviceType::kCPU);
  const AdamWManyArgs args{static_cast<const backend::AdamWEntry*>(table.data_ptr()), count, lr.data<float>(),
                           step.data<int64_t>(), static_cast<float>(beta1), static_cast<float>(beta2),
                           static_cast<float>(eps), static_cast<float>(weight_decay)};
  dispatch_float(dtype, "adamw", [&](auto tag) {
    using T = typename decltype(tag)::type;
    current_stream(kCPU).launch_many<&adamw_many_kernel<T>>("adamw", args, reads, writes);
  });
}

void increment(const Tensor& counter) {
  backend::check_scalar("increment", counter, kInt64, "counter", DeviceType::kCPU);
  current_stream(kCPU).launch<&increment_kernel>("increment", IncrementArgs{counter.data<int64_t>()},
                                                 {counter.storage()}, {counter.storage()});
}

void sum_of_squares(const Tensor& x, const Tensor& partial, int64_t slot) {
  ENCORE_CHECK(partial.dtype() == kFloat32 && partial.dim() == 1 && partial.is_contiguous() && slot >= 0 &&
                   slot < partial.numel(),
               "sum_of_squares: slot %d out of range of partial sums %s (%s)", slot, shape_str(partial.shape()),
               dtype_name(partial.dtype()));
  SumSquaresArgs args{make_layout<1>(x, {}), partial.data<float>() + slot};
  dispatch_float(x.dtype(), "sum_of_squares", [&](auto tag) {
    using T = typename decltype(tag)::type;
    current_stream(kCPU).launch<&sum_of_squares_kernel<T>>("sum_of_squares", args, {x.storage()},
                                                           {partial.storage()});
  });
}

void clip_coefficient(const Tensor& partial, const Tensor& norm, const Tensor& scale, double max_norm) {
  ENCORE_CHECK(partial.dtype() == kFloat32 && partial.is_contiguous(),
               "clip_coefficient: partial sums must be contiguous f32, got %s %s", shape_str(partial.shape()),
               dtype_name(partial.dtype()));
  backend::check_scalar("clip_coefficient", norm, kFloat32, "norm", DeviceType::kCPU);
  backend::check_scalar("clip_coefficient", scale, kFloat32, "scale", DeviceType::kCPU);
  ClipCoefArgs args{partial.data<float>(), partial.numel(), norm.data<float>(), scale.data<float>(), max_norm};
  current_stream(kCPU).launch<&clip_coefficient_kernel>("clip_coefficient", args, {partial.storage()},
                                                        {norm.storage(), scale.storage()});
}

void scale_in_place(const Tensor& x, const Tensor& scale) {
  backend::check_scalar("scale_in_place", scale, kFloat32, "scale", DeviceType::kCPU);
  ScaleArgs args{make_layout<1>(x, {}), scale.data<float>()};
  dispatch_float(x.dtype(), "scale_in_place", [&](auto tag) {
    using T = typename decltype(tag)::type;
    current_stream(kCPU).launch<&scale_kernel<T>>("scale_in_place", args, {x.storage(), scale.storage()},
                                                  {x.storage()});
  });
}

}  // namespace encore::cpu
