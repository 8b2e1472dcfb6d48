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

namespace encore::cpu {

// Float ops unless noted. p0/p1 are the op's scalars where it has any.
enum class UnaryOp {
  kExp,       // backward reads y:  g * y
  kLog,       // backward reads x:  g / x
  kSqrt,      // backward reads y:  g * 0.5 / y
  kRsqrt,     // backward reads y:  g * -0.5 * y^3
  kPow,       // x^p0; backward reads x: g * p0 * x^(p0-1) (0 when p0 == 0)
  kAbs,       // also i32/i64 (wraps at the minimum, like two's complement); backward reads x: g * sign(x)
  kTanh,      // backward reads y:  g * (1 - y^2)
  kSigmoid,   // backward reads y:  g * y * (1 - y)
  kRelu,      // also i32/i64; backward reads y: g * (y > 0)
  kGeluTanh,  // 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))); backward reads x
  kGeluErf,   // 0.5x(1 + erf(x/sqrt(2))); backward reads x
  kSilu,      // x * sigmoid(x); backward reads x
  kClamp,     // min(max(x, p0), p1), also i32/i64; backward reads x: g * (p0 <= x <= p1)
};

// True when the backward of op reads the forward output (else the input).
constexpr bool unary_saves_output(UnaryOp op) {
  return op == UnaryOp::kExp || op == UnaryOp::kSqrt || op == UnaryOp::kRsqrt || op == UnaryOp::kTanh ||
         op == UnaryOp::kSigmoid || op == UnaryOp::kRelu;
}

// out = op(a). out: contiguous, a's shape and dtype; a: any strides. For
// integer clamp, p0/p1 must be whole numbers (or infinite); they are clipped
// to the dtype's range.
void unary(UnaryOp op, const Tensor& out, const Tensor& a, double p0 = 0.0, double p1 = 0.0);

// grad_in = g * op'(...), using `saved` (y or x, see unary_saves_output).
// grad_in: contiguous; g and saved: its shape and dtype, any strides. Floats only.
void unary_backward(UnaryOp op, const Tensor& grad_in, const Tensor& g, const Tensor& saved, double p0 = 0.0,
                    double p1 = 0.0);

}  // namespace encore::cpu
