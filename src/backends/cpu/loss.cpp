// The CPU kernels of the losses: binary cross-entropy with logits (one
// elementwise kernel for the loss and both derivatives) and negative log
// likelihood (the picked values and their scatter). Contracts: the loss
// section of src/backends/kernel_table.h; formulas: src/backends/loss_math.h.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "src/backends/cpu/dispatch.h"
#include "src/backends/cpu/loops.h"
#include "src/backends/cpu/parallel.h"
#include "src/backends/cpu/simd.h"
#include "src/backends/cpu/vec_math.h"
#include "src/backends/kernel_table.h"
#include "src/backends/loss_math.h"
#include "src/backends/nn_formulas.h"
#include "src/core/kernel_errors.h"

namespace encore::cpu {
namespace {

using namespace backend;   // the shared argument structs, kinds and formulas

template <typename T>
inline float ld(const char* p) { return static_cast<float>(*reinterpret_cast<const T*>(p)); }

// ---- binary cross-entropy with logits ----
// In blocks of kBlock elements: exp and log run through the SLEEF vectors
// of vec_math.h (NOTE [ Blocked transcendentals ] in cpu/unary.cpp), so an
// element's bits do not depend on the block it falls in.
constexpr int64_t kBlock = 512;

// One block's elements from its f32 inputs and e = exp(-|x|), lu = log(1 + e).
template <typename T, BceMode kMode>
ENCORE_SIMD_CLONES void bce_block(T* out, const float* xs, const float* ts, const float* ps, const float* es,
                                  const float* lus, int64_t n) {
  for (int64_t k = 0; k < n; ++k) out[k] = T(bce_logits<kMode>(xs[k], ts[k], ps[k], es[k], lus[k]));
}

template <typename T, BceMode kMode, bool kPosWeight>
void bce_logits_loop(const BceLogitsArgs& a) {
  const Layout<4>& l = a.l;
  T* out = reinterpret_cast<T*>(l.ptr[0]);   // contiguous: element i at out + i
  parallel_for(l.numel, kGrainTranscendental, [&](int64_t b, int64_t e) {
    float xs[kBlock], ts[kBlock], ps[kBlock], es[kBlock], lus[kBlock] = {};   // lus stays 0 for d/dx
    for (int64_t sb = b; sb < e; sb += kBlock) {
      const int64_t n = std::min(kBlock, e - sb);
      if (l.contiguous) {
        const T* x = reinterpret_cast<const T*>(l.ptr[1]) + sb;
        const T* t = reinterpret_cast<const T*>(l.ptr[2]) + sb;
        const T* pw = reinterpret_cast<const T*>(l.ptr[3]) + sb;
        for (int64_t k = 0; k < n; ++k) {
          xs[k] = static_cast<float>(x[k]);
          ts[k] = static_cast<float>(t[k]);
          ps[k] = kPosWeight ? static_cast<float>(pw[k]) : 1.0f;
        }
      } else {
        int64_t j = 0;
        for_each_element(l, sb, sb + n, [&](char** p) {
          xs[j] = ld<T>(p[1]);
          ts[j] = ld<T>(p[2]);
          ps[j] = kPosWeight ? ld<T>(p[3]) : 1.0f;
          ++j;
        });
      }
      for (int64_t k = 0; k < n; ++k) es[k] = -std::fabs(xs[k]);
      vec_exp(es, es, n);
      if constexpr (kMode != BceMode::kGradInput) {   // d/dx needs no log
        for (int64_t k = 0; k < n; ++k) lus[k] = 1.0f + es[k];
        vec_log(lus, lus, n);
      }
      bce_block<T, kMode>(out + sb, xs, ts, ps, es, lus, n);
    }
  });
}

template <typename T, BceMode kMode>
KernelThunk bce_thunk(bool pw) {
  return pw ? thunk_of<&bce_logits_loop<T, kMode, true>>() : thunk_of<&bce_logits_loop<T, kMode, false>>();
}

// f32 only: backend::bce_logits checks it (the op upcasts half types).
KernelThunk pick_bce_logits(const BceLogitsArgs& a) {
  switch (a.mode) {
    case BceMode::kLoss: return bce_thunk<float, BceMode::kLoss>(a.has_pos_weight);
    case BceMode::kGradInput: return bce_thunk<float, BceMode::kGradInput>(a.has_pos_weight);
    case BceMode::kGradTarget: break;
  }
  return bce_thunk<float, BceMode::kGradTarget>(a.has_pos_weight);
}

// ---- negative log likelihood ----

template <typename T, typename I>
void nll_loop(const NllArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  const I* target = static_cast<const I*>(a.target);
  const T* w = static_cast<const T*>(a.weight);
  T* out = static_cast<T*>(a.out);
  T* out_w = static_cast<T*>(a.out_weight);
  parallel_for(a.outer * a.inner, kGrainElementwise, [&](int64_t b, int64_t e) {
    for (int64_t m = b; m < e; ++m) {
      const int64_t t = static_cast<int64_t>(target[m]);
      if (!counted_class(t, a.classes, a.ignore_index)) {
        if (t != a.ignore_index) report_kernel_error(KernelError::kNllTarget);   // NOTE [ Index checks ]
        out[m] = T(0.0f);
        out_w[m] = T(0.0f);
        continue;
      }
      const int64_t o = m / a.inner, k = m - o * a.inner;
      const float wt = w != nullptr ? static_cast<float>(w[t]) : 1.0f;
      out[m] = T(-(wt * static_cast<float>(x[(o * a.classes + t) * a.inner + k])));
      out_w[m] = T(wt);
    }
  });
}

template <typename T, typename I>
void nll_backward_loop(const NllBackwardArgs& a) {
  const T* g = static_cast<const T*>(a.g);
  const I* target = static_cast<const I*>(a.target);
  const T* w = static_cast<const T*>(a.weight);
  T* gx = static_cast<T*>(a.gx);
  const int64_t slab = a.classes * a.inner;
  parallel_for(a.outer, std::max<int64_t>(1, kGrainElementwise / std::max<int64_t>(1, slab)),
               [&](int64_t b, int64_t e) {
                 std::memset(static_cast<void*>(gx + b * slab), 0, static_cast<size_t>((e - b) * slab) * sizeof(T));
                 for (int64_t o = b; o < e; ++o) {
                   for (int64_t k = 0; k < a.inner; ++k) {
                     const int64_t m = o * a.inner + k;
                     const int64_t t = static_cast<int64_t>(target[m]);
                     if (!counted_class(t, a.classes, a.ignore_index)) continue;
                     const float wt = w != nullptr ? static_cast<float>(w[t]) : 1.0f;
                     gx[(o * a.classes + t) * a.inner + k] = T(-(wt * static_cast<float>(g[m])));
                   }
                 }
               });
}

template <typename Args, template <typename, typename> class Entry>
KernelThunk pick_typed(const Args& a, const char* op) {
  return dispatch_float(a.dtype, op, [&](auto tag) -> KernelThunk {
    using T = typename decltype(tag)::type;
    return a.index == DType::kInt32 ? thunk_of<&Entry<T, int32_t>::run>() : thunk_of<&Entry<T, int64_t>::run>();
  });
}

template <typename T, typename I>
struct NllEntry {
  static void run(const NllArgs& a) { nll_loop<T, I>(a); }
};
template <typename T, typename I>
struct NllBackwardEntry {
  static void run(const NllBackwardArgs& a) { nll_backward_loop<T, I>(a); }
};

KernelThunk pick_nll(const NllArgs& a) { return pick_typed<NllArgs, NllEntry>(a, "nll_loss"); }
KernelThunk pick_nll_backward(const NllBackwardArgs& a) {
  return pick_typed<NllBackwardArgs, NllBackwardEntry>(a, "nll_loss_backward");
}

}  // namespace

extern const LossKernels kLoss = {
    .bce_logits = specialized_kernel<&pick_bce_logits>(),
    .nll = specialized_kernel<&pick_nll>(),
    .nll_backward = specialized_kernel<&pick_nll_backward>(),
};

}  // namespace encore::cpu
