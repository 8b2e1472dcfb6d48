// CUDA kernels for broadcasting binary arithmetic and tensor-scalar arithmetic.
// Same functions, arguments and contracts as src/backends/cpu/binary.h (read the
// contracts there); every tensor argument lives on one CUDA device. Launches
// go through current_stream(device) (src/core/stream.h) so that capture and
// profiling see them; the kernels themselves are in binary.cu.
#pragma once

#include <cstdint>

#include "encore/tensor.h"
#include "src/backends/op_kinds.h"

namespace encore::cuda {

using backend::BinaryOp;
using backend::ScalarOp;

void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha = 1.0);
void binary_scalar(ScalarOp op, const Tensor& out, const Tensor& a, double s);

}  // namespace encore::cuda
