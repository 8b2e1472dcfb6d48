#include "src/backends/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <climits>

#include "src/backends/kernels.h"
#include "src/backends/cpu/dispatch.h"
#include "src/backends/cpu/parallel.h"
#include "src/backends/matmul_layout.h"
#include "src/core/stream.h"

namespace encore::cpu {
namespace {

// OpenBLAS 0.3.21 runs a GEMM with m*n*k <= SMP_THRESHOLD_MIN (65536) *
// GEMM_MULTITHREAD_THRESHOLD (4) on the calling thread. Batches of such small
// matrices are parallelised over the batch instead; bigger ones are left to
// OpenBLAS's own threads, one matrix after another.
constexpr int64_t kSmallGemm = 65536 * 4;      // multiply-adds per matrix
constexpr int64_t kGrainGemm = 1 << 16;        // multiply-adds per thread, at least
constexpr int64_t kColumnBlock = 256;          // column-sum accumulators (floats) on the stack

// ---- kernels ----

// A batch of row-major GEMMs (batch_ndim 0: one). Offsets of item i come from
// its multi-index over batch_shape and each operand's batch strides.
struct GemmArgs {
  const float* a;
  const float* b;
  float* c;
  int64_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  bool trans_a, trans_b;
  int batch_ndim;
  int64_t batch_shape[kMaxDims];
  int64_t batch_stride[3][kMaxDims];   // elements; [0] a, [1] b, [2] c; 0 = broadcast (c: summed into)
};

void gemm_one(const GemmArgs& g, const float* a, const float* b, float* c, float beta) {
  if (g.k == 0) {   // an empty sum: C = beta C (BLAS would reject lda < 1)
    for (int64_t i = 0; i < g.m; ++i) {
      float* row = c + i * g.ldc;
      for (int64_t j = 0; j < g.n; ++j) row[j] = beta == 0.f ? 0.f : beta * row[j];
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans, g.trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(g.m), static_cast<blasint>(g.n), static_cast<blasint>(g.k), g.alpha, a,
              static_cast<blasint>(g.lda), b, static_cast<blasint>(g.ldb), beta, c, static_cast<blasint>(g.ldc));
}

// Runs batch items [begin, end). An item is the first into its C matrix when
// its index is 0 on every dim that C is summed over (stride 0): it applies
// beta, the rest add with beta = 1.
void gemm_range(const GemmArgs& g, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    int64_t off[3] = {0, 0, 0};
    bool first = true;
    int64_t rem = i;
    for (int d = g.batch_ndim - 1; d >= 0; --d) {
      const int64_t idx = rem % g.batch_shape[d];
      rem /= g.batch_shape[d];
      for (int o = 0; o < 3; ++o) off[o] += idx * g.batch_stride[o][d];
      if (g.batch_stride[2][d] == 0 && idx != 0) first = false;
    }
    gemm_one(g, g.a + off[0], g.b + off[1], g.c + off[2], first ? g.beta : 1.f);
  }
}

void gemm_kernel(const GemmArgs& g) {
  if (g.m == 0 || g.n == 0) return;
  int64_t batch = 1;
  bool sums = false;
  for (int d = 0; d < g.batch_ndim; ++d) {
    batch *= g.batch_shape[d];
    sums |= g.batch_shape[d] > 1 && g.batch_stride[2][d] == 0;
  }
  // Multiply-adds per matrix, in double: m * n * k can pass 2^63.
  const double work =
      static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(std::max<int64_t>(g.k, 1));
  if (!sums && work <= kSmallGemm) {   // items write disjoint C matrices: safe to split
    parallel_for(batch, std::max<int64_t>(1, kGrainGemm / static_cast<int64_t>(work)),
                 [&](int64_t b, int64_t e) { gemm_range(g, b, e); });
  } else {
    gemm_range(g, 0, batch);
  }
}

template <typename T>
struct ColumnSumArgs {
  const T* x;      // [rows, cols], row stride ldx, unit column stride
  T* out;          // [cols], contiguous
  int64_t rows, cols, ldx;
};

// Blocks of kColumnBlock columns; within a block rows go outer and columns
// inner, so the inner loop runs over contiguous memory and vectorizes.
template <typename T>
void column_sum_kernel(const ColumnSumArgs<T>& a) {
  const int64_t blocks = (a.cols + kColumnBlock - 1) / kColumnBlock;
  const int64_t grain = std::max<int64_t>(1, kGrainElementwise / std::max<int64_t>(1, a.rows * kColumnBlock));
  parallel_for(blocks, grain, [&](int64_t begin, int64_t end) {
    float acc[kColumnBlock];
    for (int64_t blk = begin; blk < end; ++blk) {
      const int64_t j0 = blk * kColumnBlock;
      const int64_t w = std::min(kColumnBlock, a.cols - j0);
      std::fill(acc, acc + w, 0.f);
      for (int64_t r = 0; r < a.rows; ++r) {
        const T* row = a.x + r * a.ldx + j0;
        for (int64_t j = 0; j < w; ++j) acc[j] += static_cast<float>(row[j]);
      }
      for (int64_t j = 0; j < w; ++j) a.out[j0 + j] = T(acc[j]);
    }
  });
}

// ---- layout helpers ----

using backend::batch_stride;

void check_blas_int(int64_t v, const Tensor& a, const Tensor& b) {
  ENCORE_CHECK(v <= INT_MAX, "matmul: shapes %s and %s are too large for 32-bit BLAS indices",
               shape_str(a.shape()), shape_str(b.shape()));
}

// Batch strides of t (elements) over the batch shape `batch`.
void batch_strides(const Tensor& t, const Shape& batch, int64_t* out) {
  for (size_t i = 0; i < batch.size(); ++i) out[i] = batch_stride(t, batch, i);
}

void launch_gemm(const GemmArgs& args, Storage* a, Storage* b, Storage* c) {
  if (args.beta == 0.f) {
    current_stream(kCPU).launch<&gemm_kernel>("gemm", args, {a, b}, {c});
  } else {
    current_stream(kCPU).launch<&gemm_kernel>("gemm", args, {a, b, c}, {c});
  }
}

// The f32 case of matmul() (see gemm.h).
void matmul_f32(const Tensor& out, const Tensor& a_in, const Tensor& b_in, float alpha, float beta) {
  const auto [a, b, la, lb, lc, batch] = backend::matmul_operands(out, a_in, b_in);
  GemmArgs g{};
  g.a = static_cast<const float*>(a.data_ptr());
  g.b = static_cast<const float*>(b.data_ptr());
  g.c = static_cast<float*>(out.data_ptr());
  g.m = a.size(-2), g.n = b.size(-1), g.k = a.size(-1);
  g.lda = la.ld, g.ldb = lb.ld, g.ldc = lc.ld;
  g.trans_a = la.trans, g.trans_b = lb.trans;
  g.alpha = alpha, g.beta = beta;
  for (int64_t v : {g.m, g.n, g.k, g.lda, g.ldb, g.ldc}) check_blas_int(v, a_in, b_in);
  g.batch_ndim = static_cast<int>(batch.size());
  std::copy(batch.begin(), batch.end(), g.batch_shape);
  batch_strides(a, batch, g.batch_stride[0]);
  batch_strides(b, batch, g.batch_stride[1]);
  batch_strides(out, batch, g.batch_stride[2]);
  if (numel_of(batch) == 0) {   // out is a sum over no items: beta * out
    if (beta == 0.f) backend::fill(out, 0.0);
    else if (beta != 1.f) backend::binary_scalar(backend::ScalarOp::kMul, out, out, beta);
    return;
  }
  launch_gemm(g, a.storage(), b.storage(), out.storage());
}

}  // namespace

// ---- launchers ----

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc, Storage* a_st,
          Storage* b_st, Storage* c_st) {
  for (int64_t v : {m, n, k, lda, ldb, ldc}) {
    ENCORE_CHECK(v >= 0 && v <= INT_MAX, "gemm: size %d (m %d, n %d, k %d) does not fit BLAS's 32-bit ints", v,
                 m, n, k);
  }
  GemmArgs g{};
  g.a = a, g.b = b, g.c = c;
  g.m = m, g.n = n, g.k = k, g.lda = lda, g.ldb = ldb, g.ldc = ldc;
  g.alpha = alpha, g.beta = beta, g.trans_a = trans_a, g.trans_b = trans_b;
  launch_gemm(g, a_st, b_st, c_st);
}

void matmul(const Tensor& out, const Tensor& a, const Tensor& b, float alpha, float beta) {
  ENCORE_CHECK(a.dim() >= 2 && b.dim() >= 2 && out.dim() >= 2 && a.size(-1) == b.size(-2) &&
                   out.size(-2) == a.size(-2) && out.size(-1) == b.size(-1),
               "matmul: shapes %s and %s do not multiply into %s", shape_str(a.shape()), shape_str(b.shape()),
               shape_str(out.shape()));
  ENCORE_CHECK(a.dtype() == out.dtype() && b.dtype() == out.dtype(),
               "matmul: dtypes %s, %s and output %s differ (shapes %s and %s)", dtype_name(a.dtype()),
               dtype_name(b.dtype()), dtype_name(out.dtype()), shape_str(a.shape()), shape_str(b.shape()));
  dispatch_float(out.dtype(), "matmul", [](auto) {});   // rejects integer dtypes with a clear message
  if (out.dtype() == kFloat32) return matmul_f32(out, a, b, alpha, beta);
  // f16/bf16: multiply in f32, round back on store (see gemm.h).
  const Tensor out32 = beta == 0.f ? empty(out.shape(), kFloat32, out.device()) : out.detach().to(kFloat32);
  matmul_f32(out32, a.detach().to(kFloat32), b.detach().to(kFloat32), alpha, beta);
  backend::copy(out, out32);
}

void column_sum(const Tensor& out, const Tensor& x_in) {
  ENCORE_CHECK(x_in.dim() == 2 && out.dim() == 1 && out.size(0) == x_in.size(1) && out.is_contiguous() &&
                   out.dtype() == x_in.dtype(),
               "column_sum: cannot sum %s (%s) into %s (%s)", shape_str(x_in.shape()), dtype_name(x_in.dtype()),
               shape_str(out.shape()), dtype_name(out.dtype()));
  const bool rows_dense = x_in.strides()[1] == 1 || x_in.size(1) <= 1;
  const Tensor x = rows_dense ? x_in : x_in.detach().contiguous();
  dispatch_float(out.dtype(), "column_sum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    ColumnSumArgs<T> args{static_cast<const T*>(x.data_ptr()), out.data<T>(), x.size(0), x.size(1),
                          x.strides()[0]};
    current_stream(kCPU).launch<&column_sum_kernel<T>>("column_sum", args, {x.storage()}, {out.storage()});
  });
}

}  // namespace encore::cpu
