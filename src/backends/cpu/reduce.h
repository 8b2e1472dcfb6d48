// CPU kernels for reductions: sum, mean, var (as a sum of squared deviations),
// max/argmax with first-index ties, and the scatter that routes max's gradient.
//
//   // a: [B, T, C]; reduce dims 0 and 2 -> out [T] (contiguous, f32)
//   cpu::sum(out, a, cpu::dim_bit(0) | cpu::dim_bit(2));
//
// Every launcher takes the input with any strides and a contiguous output
// whose elements are the kept dims of the input in order (so keepdim only
// changes the output's shape, not its layout). Shapes and strides travel
// inline in the kernel arguments (ReduceGeom), so captured graphs replay them.
#pragma once

#include <cstdint>

#include "encore/tensor.h"
#include "src/backends/op_kinds.h"

namespace encore::cpu {

using backend::DimMask;
using backend::dim_bit;

// out[o] = sum of the reduced elements. Float inputs accumulate in f32 and
// store in out's dtype (the input's, or f32); integer and bool inputs
// accumulate in wrapping 64-bit arithmetic and store in out's dtype (i64 for
// sum, the input's for sum_to). An empty reduction gives 0.
void sum(const Tensor& out, const Tensor& a, DimMask dims);
// out[o] = sum / count (floats only; out f32 or a's dtype). count 0 gives NaN.
void mean(const Tensor& out, const Tensor& a, DimMask dims);
// out[o] = sum (a - mean[o])^2 / max(0, count - correction); mean: contiguous
// f32 with out's numel (from mean() above). Dividing by 0 gives inf or NaN.
void var(const Tensor& out, const Tensor& a, const Tensor& mean, DimMask dims, int64_t correction);
// Max over the reduced dims: values (a's dtype; may be undefined for argmax)
// and indices (i64): the row-major index within the reduced dims of the first
// maximum; a NaN is the maximum (the first NaN wins). Needs a non-empty reduction.
void max(const Tensor& values, const Tensor& indices, const Tensor& a, DimMask dims);
// Max's backward: grad_in (contiguous, viewed as [outer, n, inner]) = 0
// except grad_in[p, indices[p, i], i] = grad_out[p, i]. grad_out and indices
// are contiguous [outer, inner]; indices outside [0, n) are skipped.
void max_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& indices, int64_t outer, int64_t n,
                  int64_t inner);

}  // namespace encore::cpu
