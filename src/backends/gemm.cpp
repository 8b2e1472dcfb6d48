// The host side of the gemm family (contracts in kernels.h, "gemm"): the
// checks, the operands as BLAS reads them (matmul_layout.h), the batch
// description of GemmArgs, the f32 accumulators and the scratch each backend
// asks for, and one launch of the entry of the device's table (cpu/gemm.cpp:
// OpenBLAS; cuda/gemm.cu and cuda/blas.cpp: cuBLAS) with its read/write list.
#include <algorithm>
#include <cstdint>

#include "absl/types/span.h"
#include "encore/error.h"
#include "src/backends/dtype_checks.h"
#include "src/backends/kernels.h"
#include "src/backends/matmul_layout.h"
#include "src/core/stream.h"

namespace encore::backend {
namespace {

const GemmKernels& gemm_kernels(Device device) { return *kernels_for(device).gemm; }

void check_matmul(const Tensor& out, const Tensor& a, const Tensor& b) {
  ENCORE_CHECK(a.dim() >= 2 && b.dim() >= 2 && out.dim() >= 2 && a.size(-1) == b.size(-2) &&
                   out.size(-2) == a.size(-2) && out.size(-1) == b.size(-1),
               "matmul: shapes %s and %s do not multiply into %s", shape_str(a.shape()), shape_str(b.shape()),
               shape_str(out.shape()));
  ENCORE_CHECK(a.dtype() == out.dtype() && b.dtype() == out.dtype(),
               "matmul: dtypes %s, %s and output %s differ (shapes %s and %s)", dtype_name(a.dtype()),
               dtype_name(b.dtype()), dtype_name(out.dtype()), shape_str(a.shape()), shape_str(b.shape()));
  check_float(out.dtype(), "matmul");
  ENCORE_CHECK(a.device() == out.device() && b.device() == out.device(),
               "matmul: devices %s, %s and output %s differ (shapes %s and %s)", a.device().str(),
               b.device().str(), out.device().str(), shape_str(a.shape()), shape_str(b.shape()));
}

// True when out is summed over a batch dim (size > 1 in the batch, 1 or
// missing in out: NOTE [ Matmul accumulation ]).
bool sums_batch(const Tensor& out, const Shape& batch) {
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i] > 1 && batch_stride(out, batch, i) == 0) return true;
  }
  return false;
}

// The GemmArgs of c = alpha a b + beta c (operands as BLAS reads them) over
// `batch`; no workspace yet.
GemmArgs gemm_args(const Tensor& c, const MatmulOperands& o, float alpha, float beta) {
  GemmArgs g{};
  g.a = o.a.data_ptr(), g.b = o.b.data_ptr(), g.c = c.data_ptr();
  g.dtype = o.a.dtype(), g.c_dtype = c.dtype();
  g.m = o.a.size(-2), g.n = o.b.size(-1), g.k = o.a.size(-1);
  g.lda = o.la.ld, g.ldb = o.lb.ld, g.ldc = matrix_layout(c).ld;
  g.trans_a = o.la.trans, g.trans_b = o.lb.trans;
  g.alpha = alpha, g.beta = beta;
  g.batch_ndim = static_cast<int>(o.batch.size());
  std::copy(o.batch.begin(), o.batch.end(), g.batch_shape);
  for (size_t i = 0; i < o.batch.size(); ++i) {
    g.batch_stride[0][i] = batch_stride(o.a, o.batch, i);
    g.batch_stride[1][i] = batch_stride(o.b, o.batch, i);
    g.batch_stride[2][i] = batch_stride(c, o.batch, i);
  }
  g.device = c.device().index;
  return g;
}

// One launch of the backend's gemm: reads a, b (and c unless beta == 0),
// writes c and the scratch the backend asked for.
void launch_gemm(const GemmKernels& k, const Tensor& c, const MatmulOperands& o, float alpha, float beta) {
  GemmArgs g = gemm_args(c, o, alpha, beta);
  const int64_t ws_bytes = k.workspace_bytes != nullptr ? k.workspace_bytes(g) : 0;
  // A device temporary (NOTE [ cuBLAS workspace ]): capture plans it like any other.
  const Tensor ws = ws_bytes > 0 ? empty({(ws_bytes + 3) / 4}, kInt32, c.device()) : Tensor();
  if (ws.defined()) {
    g.workspace = ws.data_ptr();
    g.workspace_bytes = ws_bytes;
  }
  Storage* const reads[] = {o.a.storage(), o.b.storage(), c.storage()};
  Storage* const writes[] = {c.storage(), ws.defined() ? ws.storage() : nullptr};
  current_stream(c.device())
      .launch_many(k.gemm, "gemm", g, absl::MakeConstSpan(reads, beta == 0.f ? 2 : 3),
                   absl::MakeConstSpan(writes, ws.defined() ? 2 : 1));
}

// out = alpha a b + beta out with a, b, out of one dtype the backend's gemm
// takes (after check_matmul).
void matmul_direct(const GemmKernels& k, const Tensor& out, const Tensor& a_in, const Tensor& b_in, float alpha,
                   float beta) {
  const MatmulOperands o = matmul_operands(out, a_in, b_in);
  for (int64_t v : {o.a.size(-2), o.b.size(-1), o.a.size(-1), o.la.ld, o.lb.ld, o.lc.ld}) {
    ENCORE_CHECK(v <= k.max_size, "matmul: shapes %s and %s are too large for 32-bit BLAS indices",
                 shape_str(a_in.shape()), shape_str(b_in.shape()));
  }
  if (numel_of(o.batch) == 0) {   // out is a sum over no items: beta * out
    if (beta == 0.f) backend::fill(out, 0.0);
    else if (beta != 1.f) binary_scalar(ScalarOp::kMul, out, out, beta);
    return;
  }
  // f16/bf16 sums over batch items accumulate in an f32 copy of out, rounded
  // into out once (NOTE [ CUDA matmul batches ] in cuda/blas.cpp).
  const bool widen = out.dtype() != kFloat32 && sums_batch(out, o.batch);
  if (!widen) return launch_gemm(k, out, o, alpha, beta);
  const Tensor c = beta == 0.f ? empty(out.shape(), kFloat32, out.device()) : to_float32(out);
  launch_gemm(k, c, o, alpha, beta);
  backend::copy(out, c);
}

}  // namespace

void matmul(const Tensor& out, const Tensor& a, const Tensor& b, float alpha, float beta) {
  check_matmul(out, a, b);
  const GemmKernels& k = gemm_kernels(out.device());
  if (out.dtype() == kFloat32 || k.half_operands) return matmul_direct(k, out, a, b, alpha, beta);
  // f16/bf16 on a backend whose gemm takes f32 only: multiply in f32, round
  // back on store. b is converted before a: the order the kernels always ran in.
  const Tensor out32 = beta == 0.f ? empty(out.shape(), kFloat32, out.device()) : to_float32(out);
  const Tensor b32 = to_float32(b);
  const Tensor a32 = to_float32(a);
  matmul_direct(k, out32, a32, b32, alpha, beta);
  backend::copy(out, out32);
}

void column_sum(const Tensor& out, const Tensor& x_in) {
  ENCORE_CHECK(x_in.dim() == 2 && out.dim() == 1 && out.size(0) == x_in.size(1) && out.is_contiguous() &&
                   out.dtype() == x_in.dtype(),
               "column_sum: cannot sum %s (%s) into %s (%s)", shape_str(x_in.shape()), dtype_name(x_in.dtype()),
               shape_str(out.shape()), dtype_name(out.dtype()));
  ENCORE_CHECK(out.device() == x_in.device(), "column_sum: cannot sum %s (%s, %s) into %s (%s, %s)",
               shape_str(x_in.shape()), dtype_name(x_in.dtype()), x_in.device().str(), shape_str(out.shape()),
               dtype_name(out.dtype()), out.device().str());
  check_float(out.dtype(), "column_sum");
  const bool rows_dense = x_in.strides()[1] == 1 || x_in.size(1) <= 1;
  const Tensor x = rows_dense ? x_in : backend::contiguous(x_in);
  const GemmKernels& k = gemm_kernels(out.device());
  const int64_t rows = x.size(0), cols = x.size(1);
  // Row chunks depend on the shape only: the summation order is fixed.
  const int chunks = k.column_sum_chunks != nullptr ? k.column_sum_chunks(rows) : 1;
  const Tensor partial = chunks > 1 ? empty({chunks, cols}, kFloat32, out.device()) : Tensor();
  const ColumnSumArgs args{x.data_ptr(), out.data_ptr(), chunks > 1 ? partial.data<float>() : nullptr,
                           rows,         cols,           x.strides()[0],
                           (rows + chunks - 1) / chunks, chunks,
                           out.dtype()};
  Stream& stream = current_stream(out.device());
  if (chunks > 1) {
    stream.launch(k.column_sum, "column_sum", args, {x.storage()}, {out.storage(), partial.storage()});
  } else {
    stream.launch(k.column_sum, "column_sum", args, {x.storage()}, {out.storage()});
  }
}

}  // namespace encore::backend
