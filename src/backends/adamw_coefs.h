// AdamW's per-step constants, derived once per launch from the learning rate
// and the step count (both read from device memory by the kernel, so a
// captured step sees each step's values). One source for the CPU and CUDA
// backends, with every double operation rounded on its own (no fused
// multiply-add, no libm pow), so both derive the same bits and their updates
// stay equal bit for bit. Host and device code.
//
//   const AdamWCoefs c = adamw_coefs(*a.lr, *a.step, a.beta1, a.beta2, a.eps, a.weight_decay);
//   // then per element (NOTE [ AdamW arithmetic ] in src/backends/optim_math.h):
//   //   p = p * c.decay - c.step_size * m / (sqrt(v) * c.inv_sqrt_bias2 + c.eps)
#pragma once

#include <cmath>
#include <cstdint>

#include "src/backends/hd_math.h"
#include "src/core/host_device.h"

namespace encore::backend {

struct AdamWCoefs {
  float decay;            // 1 - lr * weight_decay: decoupled weight decay shrinks p directly
  float b1, c1, b2, c2;   // beta1, 1 - beta1, beta2, 1 - beta2
  float step_size;        // lr / (1 - beta1^t)
  float inv_sqrt_bias2;   // 1 / sqrt(1 - beta2^t)
  float eps;
};

// base^n for n >= 0 by square-and-multiply: the same products in the same
// order everywhere (libm's pow differs between glibc and CUDA in the last
// bit). Each squaring doubles the relative error, so it stays within about n
// ulps (n * 2^-53 relative): for every step count below 2^29 far below the
// f32 rounding of the constants derived from it.
ENCORE_HOST_DEVICE double integer_power(double base, int64_t n) {
  double result = 1.0;
  while (n > 0) {
    if (n & 1) result = dmul_rn(result, base);
    base = dmul_rn(base, base);
    n >>= 1;
  }
  return result;
}

// lr: this step's learning rate; step: t, counting this step (t >= 1).
ENCORE_HOST_DEVICE AdamWCoefs adamw_coefs(double lr, int64_t step, float beta1, float beta2, float eps,
                                          float weight_decay) {
  // Bias corrections: m and v start at 0, so early averages are too small by
  // these factors. In double: beta2^t is close to 1.
  const double bias1 = dsub_rn(1.0, integer_power(beta1, step));
  const double bias2 = dsub_rn(1.0, integer_power(beta2, step));
  return {static_cast<float>(dsub_rn(1.0, dmul_rn(lr, weight_decay))),
          beta1, 1.0f - beta1, beta2, 1.0f - beta2,
          static_cast<float>(ddiv_rn(lr, bias1)),
          static_cast<float>(ddiv_rn(1.0, dsqrt_rn(bias2))),
          eps};
}

}  // namespace encore::backend
