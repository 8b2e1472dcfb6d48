// CUDA kernels for fill, strided copy with dtype conversion (on one device), arange and Philox random draws.
// Same functions, arguments and contracts as src/backends/cpu/copy.h (read the
// contracts there); every tensor argument lives on one CUDA device. Launches
// go through current_stream(device) (src/core/stream.h) so that capture and
// profiling see them; the kernels themselves are in copy.cu.
#pragma once

#include <cstdint>

#include "encore/tensor.h"
#include "src/backends/op_kinds.h"

namespace encore::cuda {

using backend::RandomKind;

void fill(const Tensor& out, double value);
void copy(const Tensor& dst, const Tensor& src);
void arange(const Tensor& out, double start, double step);
void random(const Tensor& out, const Tensor& state, RandomKind kind);

}  // namespace encore::cuda
