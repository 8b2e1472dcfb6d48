// CUDA kernels for matrix products through cuBLAS, and the column sums of bias gradients.
// Same functions, arguments and contracts as src/backends/cpu/gemm.h (read the
// contracts there); every tensor argument lives on one CUDA device. Launches
// go through current_stream(device) (src/core/stream.h) so that capture and
// profiling see them; the kernels themselves are in gemm.cu.
#pragma once

#include <cstdint>

#include "encore/tensor.h"
#include "src/backends/op_kinds.h"

namespace encore::cuda {

void matmul(const Tensor& out, const Tensor& a, const Tensor& b, float alpha = 1.f, float beta = 0.f);
void column_sum(const Tensor& out, const Tensor& x);

}  // namespace encore::cuda
