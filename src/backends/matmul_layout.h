// How a BLAS library (OpenBLAS on CPU, cuBLAS on CUDA) reads the matrix
// operands of a matmul: unit-stride detection with transposes (NOTE [ Matmul
// layouts ] in src/backends/kernels.h) and the broadcast batch dims.
// Backend-neutral host code: the gemm family's host side (gemm.cpp) uses it.
//
//   backend::MatrixLayout la = backend::matrix_layout(a);   // a.t(): ok, trans, ld = a's row stride
//   Shape batch = backend::batch_shape(out, a, b);          // e.g. [8, 4] for [8, 1, ...] x [4, ...]
#pragma once

#include <cstdint>

#include "encore/tensor.h"

namespace encore::backend {

// How BLAS can read a rows x cols matrix with strides (rs, cs), in elements.
struct MatrixLayout {
  bool ok = false;     // false: no unit stride, needs a copy
  bool trans = false;  // stored column-major: pass transposed
  int64_t ld = 1;      // leading dimension, elements
};

MatrixLayout blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs);
// The layout of t's last two dims (t.dim() >= 2).
MatrixLayout matrix_layout(const Tensor& t);

// The broadcast of the batch dims (all but the last two) of three tensors;
// throws naming the shapes when they do not broadcast.
Shape batch_shape(const Tensor& out, const Tensor& a, const Tensor& b);

// The operands of one matmul as BLAS reads them: a and b as given, or dense
// copies where no unit stride exists (NOTE [ Matmul layouts ]), their layouts,
// out's layout (checked: unit stride on its last dim) and the broadcast batch
// (checked: at most kMaxDims dims in all).
struct MatmulOperands {
  Tensor a, b;
  MatrixLayout la, lb, lc;
  Shape batch;
};
MatmulOperands matmul_operands(const Tensor& out, const Tensor& a, const Tensor& b);

// Stride (elements) of t's batch dim aligned with dim i of `batch` (t's batch
// dims align right); 0 when t lacks it or has size 1 there (broadcast).
int64_t batch_stride(const Tensor& t, const Shape& batch, size_t i);

}  // namespace encore::backend
