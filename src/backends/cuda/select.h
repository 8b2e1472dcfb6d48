// CUDA kernels for elementwise selection: where and masked_fill.
// Same functions, arguments and contracts as src/backends/cpu/select.h (read the
// contracts there); every tensor argument lives on one CUDA device. Launches
// go through current_stream(device) (src/core/stream.h) so that capture and
// profiling see them; the kernels themselves are in select.cu.
#pragma once

#include <cstdint>

#include "encore/tensor.h"
#include "src/backends/op_kinds.h"

namespace encore::cuda {

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
void masked_fill(const Tensor& out, const Tensor& a, const Tensor& mask, double value, bool fill_when = true);

}  // namespace encore::cuda
