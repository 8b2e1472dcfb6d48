// CUDA matrix products through cuBLAS (cublasGemmStridedBatchedEx, f32
// compute), and column sums through gemm.cu. Contracts: src/backends/cpu/gemm.h.
//
// Row-major on column-major: a row-major C[M, N] is the column-major C^T, so
// C = A B runs as C^T = B^T A^T, with B as cuBLAS's first operand. A matrix
// passed "transposed" to the CPU's BLAS (a column-major view such as w.t(),
// NOTE [ Matmul layouts ]) is passed with CUBLAS_OP_T here: no copies.
//
// Dtypes: f32 runs CUBLAS_COMPUTE_32F under the default math mode (no TF32),
// so results match the CPU to ~1e-5; f16/bf16 keep their storage type for A,
// B and C and use tensor cores with f32 accumulation (CUBLAS_COMPUTE_32F).
//
// NOTE [ CUDA matmul batches ]: one strided-batched call covers one batch
// dim with a uniform stride per operand (0 = broadcast). After dropping
// size-1 dims and merging dims that are contiguous in all three operands,
// the largest dim along which out has a stride (a "parallel" dim) becomes
// the cuBLAS batch; every other dim (out reduced over it, stride 0, or a
// second parallel dim that does not merge) is looped over on the host, one
// cuBLAS call per index, all inside ONE stream launch ("gemm") and in
// order on encore's stream. A call accumulates into out with beta when its
// index is 0 on every reduced dim, else with beta = 1
// (NOTE [ Matmul accumulation ]): the sum order is fixed, so results are
// deterministic. f16/bf16 products summed over batch items accumulate in an
// f32 copy of out (cuBLAS takes f16/bf16 A, B with an f32 C), rounded into
// out once at the end, as the CPU does; otherwise nothing is materialised.
// A product summed over a batch of
// R matrices costs R / (cuBLAS batch) calls, which ops avoid for the common
// cases by folding batch dims into rows (src/ops/matmul.cpp).
#include "src/backends/cuda/gemm.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "encore/error.h"
#include "src/backends/cuda/blas.h"
#include "src/backends/cuda/gemm_launch.h"
#include "src/backends/kernels.h"
#include "src/backends/matmul_layout.h"
#include "src/backends/tensor_layout.h"
#include "src/core/stream.h"

namespace encore::cuda {
namespace {

// ---- the cuBLAS launcher ----

// One matmul as cuBLAS calls (see NOTE [ CUDA matmul batches ]). Sizes and
// strides are in elements; pointers are to the first element of each operand.
struct GemmArgs {
  const void* a;
  const void* b;
  void* c;
  void* workspace;          // 256-byte aligned, workspace_bytes long
  int64_t workspace_bytes;
  int device;
  DType dtype;                         // of a and b
  DType c_dtype;                       // of c: dtype, or f32 (NOTE [ CUDA matmul batches ])
  int64_t m, n, k, lda, ldb, ldc;      // row-major C[m, n] = op(A)[m, k] op(B)[k, n]
  bool trans_a, trans_b;               // stored column-major (NOTE [ Matmul layouts ])
  float alpha, beta;
  int64_t batch;                       // cuBLAS batch count (>= 1)
  int64_t batch_stride[3];             // [0] a, [1] b, [2] c
  int loop_ndim;                       // dims looped over on the host, outermost first
  int64_t loop_shape[kMaxDims];
  int64_t loop_stride[3][kMaxDims];    // c's stride 0: out is summed over that dim
};

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kFloat16: return CUDA_R_16F;
    case DType::kBFloat16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

void gemm_launch(const GemmArgs& g) {
  set_device(g.device);
  BlasLease blas = lease_blas(g.device);
  // NOTE [ cuBLAS workspace ]: set-stream resets the workspace, so set it after.
  ENCORE_CUBLAS_CHECK(cublasSetStream(blas.handle, active_stream()), "gemm: cublasSetStream");
  ENCORE_CUBLAS_CHECK(cublasSetWorkspace(blas.handle, g.workspace, static_cast<size_t>(g.workspace_bytes)),
                      "gemm: cublasSetWorkspace");
  const cudaDataType_t type = cuda_type(g.dtype), c_type = cuda_type(g.c_dtype);
  const int64_t esize = dtype_size(g.dtype), c_esize = dtype_size(g.c_dtype);
  int64_t calls = 1;
  for (int d = 0; d < g.loop_ndim; ++d) calls *= g.loop_shape[d];
  for (int64_t i = 0; i < calls; ++i) {
    int64_t off[3] = {0, 0, 0};
    bool first = true;   // the first product summed into its C matrices
    int64_t rem = i;
    for (int d = g.loop_ndim - 1; d >= 0; --d) {
      const int64_t idx = rem % g.loop_shape[d];
      rem /= g.loop_shape[d];
      for (int o = 0; o < 3; ++o) off[o] += idx * g.loop_stride[o][d];
      if (g.loop_stride[2][d] == 0 && idx != 0) first = false;
    }
    const float beta = first ? g.beta : 1.f;
    // C^T[n, m] = op(B)^T[n, k] op(A)^T[k, m] in cuBLAS's column-major terms.
    ENCORE_CUBLAS_CHECK(
        cublasGemmStridedBatchedEx_64(
            blas.handle, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, g.n, g.m,
            g.k, &g.alpha, static_cast<const char*>(g.b) + off[1] * esize, type, g.ldb, g.batch_stride[1],
            static_cast<const char*>(g.a) + off[0] * esize, type, g.lda, g.batch_stride[0], &beta,
            static_cast<char*>(g.c) + off[2] * c_esize, c_type, g.ldc, g.batch_stride[2], g.batch,
            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "gemm: cublasGemmStridedBatchedEx");
  }
}

// ---- layout helpers ----

using backend::batch_stride;
using backend::matrix_layout;

struct BatchDim {
  int64_t size;
  int64_t stride[3];   // a, b, out
};

// True when out is summed over a batch dim (size > 1 in the batch, 1 or
// missing in out).
bool sums_batch(const Tensor& out, const Shape& batch) {
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i] > 1 && batch_stride(out, batch, i) == 0) return true;
  }
  return false;
}

// The batch dims of size > 1, with neighbours merged where every operand
// steps through them as through one dim.
std::vector<BatchDim> merged_batch(const Tensor& out, const Tensor& a, const Tensor& b, const Shape& batch) {
  std::vector<BatchDim> dims;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i] == 1) continue;
    const BatchDim d{batch[i], {batch_stride(a, batch, i), batch_stride(b, batch, i), batch_stride(out, batch, i)}};
    if (!dims.empty()) {
      BatchDim& outer = dims.back();
      bool merges = true;
      for (int o = 0; o < 3; ++o) merges &= outer.stride[o] == d.stride[o] * d.size;
      if (merges) {
        outer.size *= d.size;
        std::copy(d.stride, d.stride + 3, outer.stride);
        continue;
      }
    }
    dims.push_back(d);
  }
  return dims;
}

// Splits the batch into the cuBLAS batch dim and the host-looped dims.
void plan_batch(const std::vector<BatchDim>& dims, GemmArgs* g) {
  int batched = -1;   // the largest dim out has a stride along
  for (int i = 0; i < static_cast<int>(dims.size()); ++i) {
    if (dims[i].stride[2] != 0 && (batched < 0 || dims[i].size > dims[batched].size)) batched = i;
  }
  g->batch = batched < 0 ? 1 : dims[batched].size;
  for (int o = 0; o < 3; ++o) g->batch_stride[o] = batched < 0 ? 0 : dims[batched].stride[o];
  g->loop_ndim = 0;
  for (int i = 0; i < static_cast<int>(dims.size()); ++i) {
    if (i == batched) continue;
    g->loop_shape[g->loop_ndim] = dims[i].size;
    for (int o = 0; o < 3; ++o) g->loop_stride[o][g->loop_ndim] = dims[i].stride[o];
    ++g->loop_ndim;
  }
}

// A device temporary for cuBLAS (NOTE [ cuBLAS workspace ]); the caller keeps
// it alive over the launch. Sets g's workspace to its first 256-byte boundary.
Tensor workspace_for(Device device, GemmArgs* g) {
  g->workspace_bytes = blas_workspace_bytes(device.index);
  const int64_t words = (g->workspace_bytes + kBlasWorkspaceAlignment) / 4;
  Tensor ws = empty({words}, kInt32, device);
  const auto p = reinterpret_cast<uintptr_t>(ws.data_ptr());
  const auto align = static_cast<uintptr_t>(kBlasWorkspaceAlignment);
  g->workspace = reinterpret_cast<void*>((p + align - 1) & ~(align - 1));
  return ws;
}

// out = beta * out: a product with nothing to sum (k == 0 or an empty batch).
void scale_out(const Tensor& out, float beta) {
  if (beta == 1.f || out.numel() == 0) return;
  const ScaleArgs args{backend::make_layout<1>(out, {}), beta, out.dtype()};
  current_stream(out.device()).launch<&scale_launch>("gemm", args, {out.storage()}, {out.storage()});
}

void check_float(const char* op, DType t, const Tensor& x) {
  ENCORE_CHECK(t == kFloat32 || t == kFloat16 || t == kBFloat16, "%s: dtype %s of %s is not float (f32, f16, bf16)",
               op, dtype_name(t), shape_str(x.shape()));
}

}  // namespace

void matmul(const Tensor& out, const Tensor& a_in, const Tensor& b_in, float alpha, float beta) {
  ENCORE_CHECK(a_in.dim() >= 2 && b_in.dim() >= 2 && out.dim() >= 2 && a_in.size(-1) == b_in.size(-2) &&
                   out.size(-2) == a_in.size(-2) && out.size(-1) == b_in.size(-1),
               "matmul: shapes %s and %s do not multiply into %s", shape_str(a_in.shape()),
               shape_str(b_in.shape()), shape_str(out.shape()));
  ENCORE_CHECK(a_in.dtype() == out.dtype() && b_in.dtype() == out.dtype(),
               "matmul: dtypes %s, %s and output %s differ (shapes %s and %s)", dtype_name(a_in.dtype()),
               dtype_name(b_in.dtype()), dtype_name(out.dtype()), shape_str(a_in.shape()), shape_str(b_in.shape()));
  ENCORE_CHECK(a_in.device() == out.device() && b_in.device() == out.device(),
               "matmul: devices %s, %s and output %s differ (shapes %s and %s)", a_in.device().str(),
               b_in.device().str(), out.device().str(), shape_str(a_in.shape()), shape_str(b_in.shape()));
  check_float("matmul", out.dtype(), out);
  const auto [a, b, la, lb, lc, batch] = backend::matmul_operands(out, a_in, b_in);
  const int64_t m = a.size(-2), n = b.size(-1), k = a.size(-1);
  if (m == 0 || n == 0) return;   // out is empty
  if (k == 0 || numel_of(batch) == 0) return scale_out(out, beta);

  // f16/bf16 sums over batch items accumulate in f32 (NOTE [ CUDA matmul batches ]).
  const bool widen = out.dtype() != kFloat32 && sums_batch(out, batch);
  const Tensor c = !widen          ? out
                   : beta == 0.f ? empty(out.shape(), kFloat32, out.device())
                                 : out.detach().to(kFloat32);
  GemmArgs g{};
  g.a = a.data_ptr(), g.b = b.data_ptr(), g.c = c.data_ptr();
  g.device = out.device().index;
  g.dtype = out.dtype(), g.c_dtype = c.dtype();
  g.m = m, g.n = n, g.k = k;
  g.lda = la.ld, g.ldb = lb.ld, g.ldc = widen ? matrix_layout(c).ld : lc.ld;
  g.trans_a = la.trans, g.trans_b = lb.trans;
  g.alpha = alpha, g.beta = beta;
  plan_batch(merged_batch(c, a, b, batch), &g);
  const Tensor ws = workspace_for(out.device(), &g);
  Stream& stream = current_stream(out.device());
  if (beta == 0.f) {
    stream.launch<&gemm_launch>("gemm", g, {a.storage(), b.storage()}, {c.storage(), ws.storage()});
  } else {
    stream.launch<&gemm_launch>("gemm", g, {a.storage(), b.storage(), c.storage()}, {c.storage(), ws.storage()});
  }
  if (widen) backend::copy(out, c);   // round once
}

void column_sum(const Tensor& out, const Tensor& x_in) {
  ENCORE_CHECK(x_in.dim() == 2 && out.dim() == 1 && out.size(0) == x_in.size(1) && out.is_contiguous() &&
                   out.dtype() == x_in.dtype() && out.device() == x_in.device(),
               "column_sum: cannot sum %s (%s, %s) into %s (%s, %s)", shape_str(x_in.shape()),
               dtype_name(x_in.dtype()), x_in.device().str(), shape_str(out.shape()), dtype_name(out.dtype()),
               out.device().str());
  check_float("column_sum", out.dtype(), out);
  const bool rows_dense = x_in.strides()[1] == 1 || x_in.size(1) <= 1;
  const Tensor x = rows_dense ? x_in : x_in.detach().contiguous();
  const int64_t rows = x.size(0), cols = x.size(1);
  // Row chunks depend on the shape only: the summation order is fixed.
  const int64_t chunks = std::clamp<int64_t>((rows + kColumnSumChunkRows - 1) / kColumnSumChunkRows, 1,
                                             kColumnSumMaxChunks);
  const Tensor partial = chunks > 1 ? empty({chunks, cols}, kFloat32, out.device()) : Tensor();
  ColumnSumArgs args{x.data_ptr(), out.data_ptr(), chunks > 1 ? partial.data<float>() : nullptr,
                     rows, cols, x.strides()[0], (rows + chunks - 1) / chunks, static_cast<int>(chunks),
                     out.dtype()};
  Stream& stream = current_stream(out.device());
  if (chunks > 1) {
    stream.launch<&column_sum_launch>("column_sum", args, {x.storage()}, {out.storage(), partial.storage()});
  } else {
    stream.launch<&column_sum_launch>("column_sum", args, {x.storage()}, {out.storage()});
  }
}

}  // namespace encore::cuda
