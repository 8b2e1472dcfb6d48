// CUDA kernels for elementwise unary math and the fused backward of each unary op.
// Same functions, arguments and contracts as src/backends/cpu/unary.h (read the
// contracts there); every tensor argument lives on one CUDA device. Launches
// go through current_stream(device) (src/core/stream.h) so that capture and
// profiling see them; the kernels themselves are in unary.cu.
#pragma once

#include <cstdint>

#include "encore/tensor.h"
#include "src/backends/op_kinds.h"

namespace encore::cuda {

using backend::UnaryOp;
using backend::unary_saves_output;

void unary(UnaryOp op, const Tensor& out, const Tensor& a, double p0 = 0.0, double p1 = 0.0);
void unary_backward(UnaryOp op, const Tensor& grad_in, const Tensor& g, const Tensor& saved, double p0 = 0.0,
                    double p1 = 0.0);

}  // namespace encore::cuda
