// CPU kernels for elementwise unary math (exp, log, ..., gelu, clamp) and
// their fused backward kernels: one launch computes grad_in from the output
// gradient and one saved tensor, instead of a chain of elementwise ops.
//
//   cpu::unary(UnaryOp::kTanh, y, x);                       // y = tanh(x)
//   cpu::unary_backward(UnaryOp::kTanh, dx, dy, y);          // dx = dy * (1 - y^2)
//
// Each op's backward reads either its forward output y or its input x; which
// one is fixed per op by unary_saves_output() so that the op layer saves the
// right tensor. Outputs are contiguous; inputs may have any strides.
#pragma once

#include "encore/tensor.h"
#include "src/backends/op_kinds.h"

namespace encore::cpu {

using backend::UnaryOp;

using backend::unary_saves_output;

// out = op(a). out: contiguous, a's shape and dtype; a: any strides. For
// integer clamp, p0/p1 must be whole numbers (or infinite); they are clipped
// to the dtype's range.
void unary(UnaryOp op, const Tensor& out, const Tensor& a, double p0 = 0.0, double p1 = 0.0);

// grad_in = g * op'(...), using `saved` (y or x, see unary_saves_output).
// grad_in: contiguous; g and saved: its shape and dtype, any strides. Floats only.
void unary_backward(UnaryOp op, const Tensor& grad_in, const Tensor& g, const Tensor& saved, double p0 = 0.0,
                    double p1 = 0.0);

}  // namespace encore::cpu
