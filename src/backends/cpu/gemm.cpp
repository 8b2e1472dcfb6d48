// The CPU kernels of the gemm family (contracts: kernels.h, "gemm"; argument
// structs: kernel_table.h): batches of row-major f32 products through
// OpenBLAS (cblas_sgemm) and the column sums of bias gradients. f16/bf16
// products reach this backend as f32 (GemmKernels::half_operands is false).
#include <cblas.h>

#include <algorithm>
#include <climits>

#include "src/backends/cpu/dispatch.h"
#include "src/backends/cpu/parallel.h"
#include "src/backends/kernel_table.h"

namespace encore::cpu {
namespace {

using namespace backend;   // the shared argument structs, kinds and formulas

// OpenBLAS 0.3.21 runs a GEMM with m*n*k <= SMP_THRESHOLD_MIN (65536) *
// GEMM_MULTITHREAD_THRESHOLD (4) on the calling thread. Batches of such small
// matrices are parallelised over the batch instead; bigger ones are left to
// OpenBLAS's own threads, one matrix after another.
constexpr int64_t kSmallGemm = 65536 * 4;      // multiply-adds per matrix
constexpr int64_t kGrainGemm = 1 << 16;        // multiply-adds per thread, at least
constexpr int64_t kColumnBlock = 256;          // column-sum accumulators (floats) on the stack

// ---- kernels ----

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
  const float* a = static_cast<const float*>(g.a);
  const float* b = static_cast<const float*>(g.b);
  float* c = static_cast<float*>(g.c);
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
    gemm_one(g, a + off[0], b + off[1], c + off[2], first ? g.beta : 1.f);
  }
}

// Blocks of kColumnBlock columns; within a block rows go outer and columns
// inner, so the inner loop runs over contiguous memory and vectorizes.
template <typename T>
void column_sum_loop(const ColumnSumArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  T* out = static_cast<T*>(a.out);
  const int64_t blocks = (a.cols + kColumnBlock - 1) / kColumnBlock;
  const int64_t grain = std::max<int64_t>(1, kGrainElementwise / std::max<int64_t>(1, a.rows * kColumnBlock));
  parallel_for(blocks, grain, [&](int64_t begin, int64_t end) {
    float acc[kColumnBlock];
    for (int64_t blk = begin; blk < end; ++blk) {
      const int64_t j0 = blk * kColumnBlock;
      const int64_t w = std::min(kColumnBlock, a.cols - j0);
      std::fill(acc, acc + w, 0.f);
      for (int64_t r = 0; r < a.rows; ++r) {
        const T* row = x + r * a.ldx + j0;
        for (int64_t j = 0; j < w; ++j) acc[j] += static_cast<float>(row[j]);
      }
      for (int64_t j = 0; j < w; ++j) out[j0 + j] = T(acc[j]);
    }
  });
}

// ---- kernel table entries ----

// A batch of f32 GEMMs (batch_ndim 0: one).
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
struct ColumnSumEntry {
  static void run(const ColumnSumArgs& a) {
    column_sum_loop<T>(a);
  }
};

}  // namespace

extern const GemmKernels kGemm = {
    .gemm = kernel<&gemm_kernel>(),
    .half_operands = false,            // OpenBLAS: sgemm only; the host converts f16/bf16
    .max_size = INT_MAX,               // cblas's 32-bit blasint
    .workspace_bytes = nullptr,        // OpenBLAS keeps its own buffers
    .column_sum = specialized_kernel<&pick_float<ColumnSumEntry, ColumnSumArgs>>(),
    .column_sum_chunks = nullptr,      // one pass over blocks of columns
};

}  // namespace encore::cpu
