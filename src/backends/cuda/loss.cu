// CUDA kernels of the losses: binary cross-entropy with logits (one
// elementwise kernel for the loss and both derivatives) and negative log
// likelihood (contracts: the loss section of src/backends/kernel_table.h;
// formulas: src/backends/loss_math.h). Compiled with --fmad=false, like the
// CPU's -ffp-contract=off: the shared formulas round alike; only expf/logf
// differ from the CPU's SLEEF in the last bit.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "src/backends/cuda/elementwise.cuh"
#include "src/backends/kernel_table.h"
#include "src/backends/loss_math.h"
#include "src/backends/nn_formulas.h"
#include "src/core/kernel_errors.h"

namespace encore::cuda {
namespace {

using namespace backend;   // the shared argument structs, kinds and formulas

#define ENCORE_GRID_LOOP(i, n)                                                                    \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);          \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// ---- kernels ----

template <typename T, BceMode kMode, bool kPosWeight>
struct BceFn {   // operands out, x, t, pw
  __device__ void operator()(char* const* p) const {
    const float x = load<T>(p[1]), t = load<T>(p[2]);
    const float pw = kPosWeight ? static_cast<float>(load<T>(p[3])) : 1.0f;
    const float e = expf(-fabsf(x));
    const float lu = kMode == BceMode::kGradInput ? 0.0f : logf(1.0f + e);   // d/dx needs no log
    store<T>(p[0], bce_logits<kMode>(x, t, pw, e, lu));
  }
};

template <typename T, typename I>
__global__ void nll_kernel(NllArgs a) {
  kernel_prologue();
  const T* x = static_cast<const T*>(a.x);
  const I* target = static_cast<const I*>(a.target);
  const T* w = static_cast<const T*>(a.weight);
  T* out = static_cast<T*>(a.out);
  T* out_w = static_cast<T*>(a.out_weight);
  ENCORE_GRID_LOOP(m, a.outer * a.inner) {
    const int64_t t = static_cast<int64_t>(target[m]);
    if (!counted_class(t, a.classes, a.ignore_index)) {
      if (t != a.ignore_index && a.errors != nullptr) {
        atomicOr_system(a.errors, static_cast<uint32_t>(KernelError::kNllTarget));   // NOTE [ Kernel error words ]
      }
      out[m] = convert<T>(0.0f);
      out_w[m] = convert<T>(0.0f);
      continue;
    }
    const int64_t o = m / a.inner, k = m - o * a.inner;
    const float wt = w != nullptr ? to_float(w[t]) : 1.0f;
    out[m] = convert<T>(-(__fmul_rn(wt, to_float(x[(o * a.classes + t) * a.inner + k]))));
    out_w[m] = convert<T>(wt);
  }
}

// One thread per element of gx: the value of its position, so no zeroing pass.
template <typename T, typename I>
__global__ void nll_backward_kernel(NllBackwardArgs a) {
  kernel_prologue();
  const T* g = static_cast<const T*>(a.g);
  const I* target = static_cast<const I*>(a.target);
  const T* w = static_cast<const T*>(a.weight);
  T* gx = static_cast<T*>(a.gx);
  ENCORE_GRID_LOOP(i, a.outer * a.classes * a.inner) {
    const int64_t k = i % a.inner;
    const int64_t c = (i / a.inner) % a.classes;
    const int64_t o = i / (a.inner * a.classes);
    const int64_t m = o * a.inner + k;
    const int64_t t = static_cast<int64_t>(target[m]);
    float v = 0.0f;
    if (t == c && counted_class(t, a.classes, a.ignore_index)) {
      const float wt = w != nullptr ? to_float(w[t]) : 1.0f;
      v = -(__fmul_rn(wt, to_float(g[m])));
    }
    gx[i] = convert<T>(v);
  }
}

// ---- launchers (with_float, with_index: elementwise.cuh) ----

template <typename T, BceMode kMode>
void bce_launch_mode(const BceLogitsArgs& a, const char* name) {
  if (a.has_pos_weight) launch_elementwise(a.l, BceFn<T, kMode, true>{}, name);
  else launch_elementwise(a.l, BceFn<T, kMode, false>{}, name);
}

// f32 only: backend::bce_logits checks it (the op upcasts half types).
void bce_logits_launch(const BceLogitsArgs& a) {
  switch (a.mode) {
    case BceMode::kLoss: return bce_launch_mode<float, BceMode::kLoss>(a, "binary_cross_entropy_with_logits");
    case BceMode::kGradInput:
      return bce_launch_mode<float, BceMode::kGradInput>(a, "binary_cross_entropy_with_logits_backward");
    case BceMode::kGradTarget:
      return bce_launch_mode<float, BceMode::kGradTarget>(a, "binary_cross_entropy_with_logits_target_backward");
  }
}

void nll_launch(const NllArgs& a) {
  const int64_t n = a.outer * a.inner;
  if (n == 0) return;
  with_float(a.dtype, [&](auto tag) {
    with_index(a.index, [&](auto itag) {
      using T = typename decltype(tag)::type;
      using I = typename decltype(itag)::type;
      launch_kernel(nll_kernel<T, I>, blocks_for(n), kThreads, 0, active_stream(), a);
    });
  });
  check_launch("nll_loss");
}

void nll_backward_launch(const NllBackwardArgs& a) {
  const int64_t n = a.outer * a.classes * a.inner;
  if (n == 0) return;
  with_float(a.dtype, [&](auto tag) {
    with_index(a.index, [&](auto itag) {
      using T = typename decltype(tag)::type;
      using I = typename decltype(itag)::type;
      launch_kernel(nll_backward_kernel<T, I>, blocks_for(n), kThreads, 0, active_stream(), a);
    });
  });
  check_launch("nll_loss_backward");
}

}  // namespace

extern const LossKernels kLoss = {kernel<&bce_logits_launch>(), kernel<&nll_launch>(), kernel<&nll_backward_launch>()};

}  // namespace encore::cuda
