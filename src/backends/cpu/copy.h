// CPU kernels that create and move data: fill, strided copy with dtype
// conversion, arange, and Philox random draws. Each launcher takes tensors,
// packs plain arguments and launches through current_stream(kCPU).
#pragma once

#include <cstdint>

#include "encore/tensor.h"
#include "src/backends/convert.h"
#include "src/backends/op_kinds.h"

namespace encore::cpu {

void fill(const Tensor& out, double value);                 // out: any strides
void copy(const Tensor& dst, const Tensor& src);            // src broadcast to dst; dtype converted
void arange(const Tensor& out, double start, double step);  // out contiguous
using backend::RandomKind;
// out contiguous float; state: i64 [2] {seed, offset}; the kernel advances offset by numel.
void random(const Tensor& out, const Tensor& state, RandomKind kind);

// Converts one element between storage types: backend::convert (src/backends/convert.h).
using backend::convert;

}  // namespace encore::cpu
