// CPU kernels for elementwise selection: where(cond, a, b) and masked_fill.
// masked_fill with value 0 is also the fused backward of both ops (one
// launch: the gradient with zeros where it does not flow).
//
//   cpu::where(out, cond, a, b);                    // out = cond ? a : b
//   cpu::masked_fill(out, a, mask, -INFINITY);      // out = mask ? -inf : a
//   cpu::masked_fill(ga, g, cond, 0.0, false);      // ga  = cond ? g : 0
#pragma once

#include "encore/tensor.h"

namespace encore::cpu {

// out = cond ? a : b. out: contiguous, the broadcast shape of all three;
// cond: bool; a, b: out's dtype; inputs broadcast to out, any strides.
void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);

// out = (mask == fill_when) ? value : a. out: contiguous, of a broadcast shape
// that a and mask (bool) broadcast to; value converted to out's dtype (the op
// checks that it fits; to bool: value != 0).
void masked_fill(const Tensor& out, const Tensor& a, const Tensor& mask, double value, bool fill_when = true);

}  // namespace encore::cpu
