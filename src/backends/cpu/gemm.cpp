// The CPU kernels of the gemm family (contracts: kernels.h, "gemm"; argument
// structs: kernel_table.h): batches of row-major f32 products through
// OpenBLAS (cblas_sgemm) and the column sums of bias gradients. f16/bf16
// products reach this backend as f32 (GemmKernels::half_operands is false).
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>

#include "src/backends/cpu/dispatch.h"
#include "src/backends/cpu/gemm_threading.h"
#include "src/backends/cpu/parallel.h"
#include "src/backends/cpu/simd.h"
#include "src/backends/kernel_table.h"

namespace encore::cpu {
namespace {

using namespace backend;   // the shared argument structs, kinds and formulas

// NOTE [ One thread pool for GEMMs ]
// Debian's OpenBLAS is its pthreads build: its own worker threads, which spin
// (sched_yield, up to 2^28 cycles) after every threaded call. On a machine
// with as many cores as threads they take the cores from encore's
// workers running the elementwise kernels that follow each GEMM (measured
// on 2 cores, issue 19: an OpenMP 2-thread GEMM split right after a 2-thread
// OpenBLAS call ran at 0.97-1.02x of one thread, against 1.3-1.9x when
// OpenBLAS had not run threaded). So OpenBLAS runs on the calling thread only
// (openblas_set_num_threads(1) whenever encore runs a GEMM) and encore
// spreads GEMMs over its worker threads (workers.h), like every other kernel:
//   - a batch of products that write disjoint C matrices goes item by item
//     to the threads;
//   - otherwise each thread takes a band of C's rows (or of its columns,
//     whichever dimension is longer) and runs every batch item on it, in
//     batch order; bands are multiples of kGemmBand rows (or columns), so
//     their edges fall on the register-tile edges of OpenBLAS's x86-64 sgemm
//     kernels (at most 16 wide).
// Each element of C is summed over k inside one OpenBLAS call, and which
// calls a GEMM becomes depends only on its shape and the thread count: the
// bits are deterministic for a given build and thread count (test:
// MatmulTest.GemmBandsAtTwoThreadsMatchReference). A share is kGrainGemm
// multiply-adds at least: waking a sleeping worker (OMP_WAIT_POLICY=passive)
// costs from tens of microseconds up to a millisecond on a virtual machine
// (bench/RESULTS.md, issue 19, session 12). Measured in one process
// against OpenBLAS's threads (bench/gemm_threads_bench, 2 threads, issue 19):
// 0.72-0.77x the step time on the MLP 1024-4096-4096-1024, 0.96-1.00x on the
// transformer block, 0.82-0.94x on the demo GPT. A process that also calls
// OpenBLAS itself finds it single-threaded after each of encore's GEMMs.
constexpr int64_t kGrainGemm = 1 << 20;        // multiply-adds per thread, at least
constexpr int64_t kGemmBand = 16;              // rows or columns: the unit a band is made of
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

int64_t batch_items(const GemmArgs& g) {
  int64_t batch = 1;
  for (int d = 0; d < g.batch_ndim; ++d) batch *= g.batch_shape[d];
  return batch;
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

// Column sums of bias gradients. Each column is summed in f32 down the rows
// in order, so neither the clone (simd.h), the blocking nor the thread count
// moves a bit (test: MatmulTest.ColumnSumMatchesReference). Threads take
// shares of kColumnUnit columns (a 256-column bias over 512 rows, the
// transformer block's, splits in two), each share in blocks of up to
// kColumnBlock columns with the rows outer and the columns inner: the inner
// loop runs over contiguous memory and vectorizes; the accumulators of a
// block stay in L1.
constexpr int64_t kColumnUnit = 64;   // columns: the unit a thread's share is made of

template <typename T>
ENCORE_SIMD_CLONES void column_block_sum(const T* x, int64_t ldx, int64_t rows, int64_t w, T* out) {
  float acc[kColumnBlock];
  std::fill(acc, acc + w, 0.f);
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = x + r * ldx;
    for (int64_t j = 0; j < w; ++j) acc[j] += static_cast<float>(row[j]);
  }
  for (int64_t j = 0; j < w; ++j) out[j] = T(acc[j]);
}

template <typename T>
void column_sum_loop(const ColumnSumArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  T* out = static_cast<T*>(a.out);
  const int64_t units = (a.cols + kColumnUnit - 1) / kColumnUnit;
  const int64_t grain = std::max<int64_t>(1, kGrainElementwise / std::max<int64_t>(1, a.rows * kColumnUnit));
  parallel_for(units, grain, [&](int64_t begin, int64_t end) {
    const int64_t j1 = std::min(a.cols, end * kColumnUnit);
    for (int64_t j0 = begin * kColumnUnit; j0 < j1; j0 += kColumnBlock) {
      column_block_sum(x + j0, a.ldx, a.rows, std::min(kColumnBlock, j1 - j0), out + j0);
    }
  });
}

// ---- kernel table entries ----

// Which part of each batch item's C a band covers: rows [begin, end) when
// by_rows, else columns [begin, end).
struct Band {
  bool by_rows;
  int64_t begin, end;
};

// Runs every batch item, in order, on one band of C.
void gemm_band(const GemmArgs& g, const Band& band) {
  GemmArgs part = g;
  const int64_t w = band.end - band.begin;
  if (band.by_rows) {   // rows of op(A) and of C
    part.m = w;
    part.a = static_cast<const float*>(g.a) + band.begin * (g.trans_a ? 1 : g.lda);
    part.c = static_cast<float*>(g.c) + band.begin * g.ldc;
  } else {              // columns of op(B) and of C
    part.n = w;
    part.b = static_cast<const float*>(g.b) + band.begin * (g.trans_b ? g.ldb : 1);
    part.c = static_cast<float*>(g.c) + band.begin;
  }
  gemm_range(part, 0, batch_items(g));
}

// The baseline of bench/gemm_threads_bench (GemmThreading::kOpenBlas): a
// GEMM of more than kOpenBlasSmall multiply-adds goes whole to OpenBLAS's own
// threads; smaller ones in a batch are spread over the batch.
constexpr int64_t kOpenBlasSmall = 65536 * 4;   // OpenBLAS 0.3.21: SMP_THRESHOLD_MIN * GEMM_MULTITHREAD_THRESHOLD
constexpr int64_t kOpenBlasGrain = 1 << 16;     // multiply-adds per thread in such a batch
std::atomic<GemmThreading> g_threading{GemmThreading::kEncore};

// A batch of f32 GEMMs (batch_ndim 0: one).
void gemm_kernel(const GemmArgs& g) {
  if (g.m == 0 || g.n == 0) return;
  const int64_t batch = batch_items(g);
  bool sums = false;   // some C matrix is the sum of several items
  for (int d = 0; d < g.batch_ndim; ++d) sums |= g.batch_shape[d] > 1 && g.batch_stride[2][d] == 0;
  // Multiply-adds per matrix and in all, in double: m * n * k can pass 2^63.
  const double work =
      static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(std::max<int64_t>(g.k, 1));
  const double total = work * static_cast<double>(batch);
  const int threads = worker_threads();
  if (g_threading.load(std::memory_order_relaxed) == GemmThreading::kOpenBlas) {
    if (!sums && work <= kOpenBlasSmall) {
      parallel_for(batch, std::max<int64_t>(1, kOpenBlasGrain / static_cast<int64_t>(work)),
                   [&](int64_t b, int64_t e) { gemm_range(g, b, e); });
    } else {
      gemm_range(g, 0, batch);
    }
    return;
  }
  // Checked at every GEMM (a read of OpenBLAS's count): a program that also
  // calls OpenBLAS may have raised it since (bench/peers/torch_cpu_steps runs
  // libtorch, which relies on OpenBLAS's threads, between encore's steps).
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
  if (!sums && (batch % threads == 0 || batch >= 4 * threads || total < 2.0 * threads * kGrainGemm)) {
    // Whole items to each thread (evenly, or nearly: else bands), kGrainGemm
    // multiply-adds a thread at least.
    const double items = std::ceil(kGrainGemm / work);
    parallel_for(batch, items >= static_cast<double>(batch) ? batch : static_cast<int64_t>(items),
                 [&](int64_t b, int64_t e) { gemm_range(g, b, e); });
    return;
  }
  const bool by_rows = g.m >= g.n;
  const int64_t len = by_rows ? g.m : g.n;
  const int64_t bands = (len + kGemmBand - 1) / kGemmBand;
  const double per_band = total / static_cast<double>(bands);   // over the whole batch
  const int64_t grain = std::min<int64_t>(bands, static_cast<int64_t>(std::ceil(kGrainGemm / per_band)));
  parallel_for(bands, grain, [&](int64_t b, int64_t e) {
    gemm_band(g, {by_rows, b * kGemmBand, std::min(len, e * kGemmBand)});
  });
}

template <typename T>
struct ColumnSumEntry {
  static void run(const ColumnSumArgs& a) {
    column_sum_loop<T>(a);
  }
};

}  // namespace

void set_gemm_threading(GemmThreading threading) {
  g_threading.store(threading);
  openblas_set_num_threads(threading == GemmThreading::kEncore ? 1 : worker_threads());
}

extern const GemmKernels kGemm = {
    .gemm = kernel<&gemm_kernel>(),
    .half_operands = false,            // OpenBLAS: sgemm only; the host converts f16/bf16
    .max_size = INT_MAX,               // cblas's 32-bit blasint
    .workspace_bytes = nullptr,        // OpenBLAS keeps its own buffers
    .column_sum = specialized_kernel<&pick_float<ColumnSumEntry, ColumnSumArgs>>(),
    .column_sum_chunks = nullptr,      // one pass over blocks of columns
};

}  // namespace encore::cpu
