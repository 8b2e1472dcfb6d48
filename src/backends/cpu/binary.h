// CPU kernels for broadcasting binary arithmetic and tensor-scalar arithmetic.
#pragma once

#include "encore/tensor.h"
#include "src/backends/op_kinds.h"

namespace encore::cpu {

using backend::BinaryOp;
// out = a + alpha * b (kAdd), a - alpha * b (kSub), a * b, a / b. out has the
// broadcast shape (any strides, may alias a for in-place); all same dtype.
void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha = 1.0);

using backend::ScalarOp;
// out = a + s, a * s, s - a, s / a.
void binary_scalar(ScalarOp op, const Tensor& out, const Tensor& a, double s);

}  // namespace encore::cpu
