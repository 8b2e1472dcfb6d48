// CPU kernels for broadcasting binary arithmetic and tensor-scalar arithmetic.
#pragma once

#include "encore/tensor.h"

namespace encore::cpu {

enum class BinaryOp { kAdd, kSub, kMul, kDiv };
// out = a + alpha * b (kAdd), a - alpha * b (kSub), a * b, a / b. out has the
// broadcast shape (any strides, may alias a for in-place); all same dtype.
void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha = 1.0);

enum class ScalarOp { kAdd, kMul, kRsub, kRdiv };
// out = a + s, a * s, s - a, s / a.
void binary_scalar(ScalarOp op, const Tensor& out, const Tensor& a, double s);

}  // namespace encore::cpu
