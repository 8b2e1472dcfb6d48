// The element arithmetic of the optimizer kernels, written once for the CPU
// (src/backends/cpu/optim.cpp) and CUDA (src/backends/cuda/optim.cu)
// backends: one SGD element and one AdamW element, in f32, every operation
// correctly rounded on its own and none fused, so that both backends give the
// same bits for the same inputs. Host and device code (ENCORE_HOST_DEVICE);
// nvcc-safe: no Abseil, no tensor types.
//
//   const AdamWCoefs c = adamw_coefs(*a.lr, *a.step, a.beta1, a.beta2, a.eps, a.weight_decay);
//   for (...) adamw_element(c, p, g, m, v);      // p, m, v updated in place (f32)
//
//   const float d = sgd_direction(p, g, wd);
//   p = sgd_apply(p, lr, has_momentum ? sgd_momentum(d, buf, mu, nesterov) : d);
#pragma once

#include <cmath>

#include "src/backends/adamw_coefs.h"
#include "src/backends/hd_math.h"
#include "src/core/host_device.h"

namespace encore::backend {

// ---- SGD ----

// NOTE [ SGD arithmetic ]: PyTorch's SGD (dampening 0) in f32:
//   d = g + wd p  (only when wd != 0, as PyTorch adds the L2 term)
//   buf = mu buf + d;  update = nesterov ? d + mu buf : buf   (with momentum)
//   p = p - lr update
// buf starts at 0, so the first momentum step gives buf = d exactly (PyTorch
// clones d).

// The descent direction of one element: g, plus the L2 term when wd != 0.
ENCORE_HOST_DEVICE float sgd_direction(float p, float g, float wd) {
  return wd != 0.0f ? fadd_rn(g, fmul_rn(wd, p)) : g;
}

// Updates the momentum buffer with direction d; returns the step's update.
ENCORE_HOST_DEVICE float sgd_momentum(float d, float& buf, float mu, bool nesterov) {
  buf = fadd_rn(fmul_rn(mu, buf), d);
  return nesterov ? fadd_rn(d, fmul_rn(mu, buf)) : buf;
}

// The parameter after a step of `update` at learning rate lr.
ENCORE_HOST_DEVICE float sgd_apply(float p, float lr, float update) { return fsub_rn(p, fmul_rn(lr, update)); }

// ---- AdamW ----

// NOTE [ AdamW arithmetic ]: one element of the update, PyTorch's AdamW in
// f32 with the bias corrections folded into two per-step constants (as
// PyTorch's own kernels do; AdamWCoefs, src/backends/adamw_coefs.h):
//   p = p * (1 - lr wd);  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g
//   p = p - (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// One sqrt and one division per element. The CPU's vector paths
// (cpu/optim.cpp) perform exactly these IEEE operations in this order, so
// every path of every backend gives the same bits, whatever the ISA, the
// chunking or the position of an element in a vector.
ENCORE_HOST_DEVICE void adamw_element(const AdamWCoefs& c, float& p, float g, float& m, float& v) {
  m = fadd_rn(fmul_rn(c.b1, m), fmul_rn(c.c1, g));                // first moment: running mean of g
  v = fadd_rn(fmul_rn(c.b2, v), fmul_rn(fmul_rn(c.c2, g), g));    // second moment: running mean of g^2
  const float denom = fadd_rn(fmul_rn(fsqrt_rn(v), c.inv_sqrt_bias2), c.eps);
  p = fsub_rn(fmul_rn(p, c.decay), fdiv_rn(fmul_rn(c.step_size, m), denom));   // step of about lr per element
}

}  // namespace encore::backend
