// CPU matrix products through OpenBLAS (cblas_sgemm), launched on the stream.
//
// Two levels, both reusable outside matmul/linear:
//
//   // Pointer level: one row-major f32 GEMM, C = alpha op(A) op(B) + beta C.
//   cpu::gemm(/*trans_a=*/false, /*trans_b=*/true, m, n, k, 1.f, a, lda, b, ldb, 0.f, c, ldc,
//             a_st, b_st, c_st);
//
//   // Tensor level: out[.., n, m] = a[.., n, k] @ b[.., k, m] (+ beta * out).
//   cpu::matmul(out, x, w.t());     // w.t() goes to BLAS as CblasTrans: no copy
//
// NOTE [ Matmul layouts ]: a matrix operand is passed to BLAS as is when one
// of its last two dims has unit stride (row-major -> CblasNoTrans, column-major
// such as w.t() -> CblasTrans, leading dim = the other stride). Only a matrix
// with no unit stride (e.g. a column slice with step 2, or an expanded row) is
// copied. Batch dims may have any strides, 0 included (broadcast).
//
// NOTE [ Matmul accumulation ]: out's batch dims may be smaller than the
// broadcast batch of a and b (size 1 or missing). Those dims are reduced: the
// products of the batch items that map to the same out matrix are summed into
// it (beta applies to the first, then beta = 1). Backward uses this to sum a
// gradient over broadcast batch dims in the GEMM itself, with no temporary of
// the broadcast size and no separate reduction.
//
// f16/bf16: operands are converted to f32 (a copy), multiplied with sgemm and
// the result rounded back on store. OpenBLAS 0.3.21 has no f16 GEMM that we
// can rely on, and f32 accumulation is what users expect for these types.
#pragma once

#include <cstdint>

#include "encore/tensor.h"

namespace encore::cpu {

// One row-major f32 GEMM: C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C.
// op(X) = X^T when trans_x. lda/ldb/ldc are row strides in elements of the
// matrices as stored (A is [k, m] in memory when trans_a). The storages are
// the ones a, b, c point into (the launch's read and write sets; c is also
// read when beta != 0). m, n, k, ld* must fit BLAS's 32-bit ints.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc, Storage* a_st,
          Storage* b_st, Storage* c_st);

// out[.., n, m] = alpha * a[.., n, k] @ b[.., k, m] + beta * out, all of one
// float dtype (f32, f16, bf16), each at least 2-D. a and b: any strides; their
// batch dims broadcast (NumPy) against out's; out's last dim has unit stride
// (fresh tensors always do). See NOTE [ Matmul layouts ] and
// NOTE [ Matmul accumulation ]. beta = 0 overwrites out (never reads it).
void matmul(const Tensor& out, const Tensor& a, const Tensor& b, float alpha = 1.f, float beta = 0.f);

// out[j] = sum_i x[i, j]: column sums of a 2-D x (any strides; copied if its
// rows are not contiguous) into a contiguous 1-D out, same float dtype,
// accumulated in f32. Used for a bias gradient.
void column_sum(const Tensor& out, const Tensor& x);

}  // namespace encore::cpu
