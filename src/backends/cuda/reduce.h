// CUDA kernels for reductions: sum, mean, var, max/argmax, and the scatter of max's gradient.
// Same functions, arguments and contracts as src/backends/cpu/reduce.h (read the
// contracts there); every tensor argument lives on one CUDA device. Launches
// go through current_stream(device) (src/core/stream.h) so that capture and
// profiling see them; the kernels themselves are in reduce.cu.
#pragma once

#include <cstdint>

#include "encore/tensor.h"
#include "src/backends/op_kinds.h"

namespace encore::cuda {

using backend::DimMask;
using backend::dim_bit;

void sum(const Tensor& out, const Tensor& a, DimMask dims);
void mean(const Tensor& out, const Tensor& a, DimMask dims);
void var(const Tensor& out, const Tensor& a, const Tensor& mean, DimMask dims, int64_t correction);
void max(const Tensor& values, const Tensor& indices, const Tensor& a, DimMask dims);
void max_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& indices, int64_t outer, int64_t n,
                  int64_t inner);

}  // namespace encore::cuda
