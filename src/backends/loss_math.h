// The element formulas of binary_cross_entropy_with_logits, shared by the
// CPU kernels (cpu/loss.cpp) and the CUDA kernels (cuda/loss.cu), written
// once with ENCORE_HOST_DEVICE as unary_math.h is. The numerically stable
// form: with e = exp(-|x|) and lu = log(1 + e) (each backend computes those
// two with its own exp and log: SLEEF vectors on the CPU, expf/logf on CUDA),
//   softplus(-x) = max(-x, 0) + log1p(e)        (never overflows)
//   sigmoid(-x)  = x >= 0 ? e / (1 + e) : 1 / (1 + e)
// and log1p(e) is recovered from lu with one correction step (exact where
// 1 + e rounds). nvcc-safe.
//
//   const float e = expf(-fabsf(x)), lu = logf(1.f + e);
//   out = backend::bce_logits<BceMode::kLoss>(x, t, pw, e, lu);
#pragma once

#include "src/backends/op_kinds.h"
#include "src/core/host_device.h"

namespace encore::backend {

// log1p(e) from lu = log(u), u = 1 + e rounded: log(u) - ((u - 1) - e) / u.
ENCORE_HOST_DEVICE_INLINE float log1p_from(float e, float lu) {
  const float u = 1.0f + e;
  return lu - ((u - 1.0f) - e) / u;
}

// One element of BceLogitsArgs (kernel_table.h): the loss, d/dx or d/dt.
template <BceMode kMode>
ENCORE_HOST_DEVICE_INLINE float bce_logits(float x, float t, float pw, float e, float lu) {
  if constexpr (kMode == BceMode::kGradInput) {   // needs no log: lu is not read
    const float lw = 1.0f + (pw - 1.0f) * t;
    const float sig_neg = (x >= 0.0f ? e : 1.0f) / (1.0f + e);   // one division, selected before it
    return (1.0f - t) - lw * sig_neg;
  } else {
    const float softplus_neg = (x < 0.0f ? -x : 0.0f) + log1p_from(e, lu);
    if constexpr (kMode == BceMode::kLoss) return (1.0f - t) * x + (1.0f + (pw - 1.0f) * t) * softplus_neg;
    else return -x + (pw - 1.0f) * softplus_neg;
  }
}

}  // namespace encore::backend
