// The CUDA kernels of the gemm family (contracts: kernels.h, "gemm";
// argument structs: kernel_table.h): the GEMM entry, which hands real
// products to cuBLAS (cuda/blas.cpp: its status checks need Abseil, which
// stays out of .cu files) and computes C = beta * C itself for products with
// nothing to sum (k == 0); deterministic column sums for bias gradients.
// Kernels, then launchers, which are the entries of the CUDA kernel table.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "src/backends/cuda/convert.cuh"
#include "src/backends/cuda/launch.h"
#include "src/backends/kernel_table.h"

namespace encore::cuda {

// In blas.cpp (declared in blas.h): the cuBLAS calls of one GemmArgs (m, n, k
// all > 0), and the workspace the host allocates for them.
void cublas_gemm(const backend::GemmArgs& a);
int64_t cublas_gemm_workspace_bytes(const backend::GemmArgs& a);

namespace {

using namespace backend;   // the shared argument structs, kinds and formulas

// Column sums in two deterministic passes (no atomics: replays are bit-identical).
// Pass 1: block (x, y) sums 32 columns over row chunk y, 8 row lanes per column
// combined in a fixed order. With chunks == 1 it writes out directly; else it
// writes f32 partials [chunks, cols] and pass 2 sums them in chunk order.
constexpr int kColumnSumTile = 32;       // columns per block (one warp wide)
constexpr int kColumnSumLanes = 8;       // rows summed in parallel per column
constexpr int kColumnSumMaxChunks = 64;  // row chunks (grid.y) at most
constexpr int64_t kColumnSumChunkRows = 512;   // rows per chunk, at least (before the cap)

// ---- kernels ----

// Pass 1. Block (blockIdx.x, blockIdx.y) covers columns [32 bx, 32 bx + 32)
// and rows [by * chunk_rows, (by + 1) * chunk_rows). Thread (tx, ty) sums
// rows ty, ty + 8, ... of its chunk for column 32 bx + tx (a warp reads 32
// consecutive columns of one row: coalesced); the 8 lanes of a column are
// then added in lane order. The order depends on the shape only.
template <typename T>
__global__ void column_sum_kernel(ColumnSumArgs a) {
  kernel_prologue();
  __shared__ float lanes[kColumnSumLanes][kColumnSumTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kColumnSumTile + tx;
  const int64_t row_begin = static_cast<int64_t>(blockIdx.y) * a.chunk_rows;
  const int64_t row_end = min(a.rows, row_begin + a.chunk_rows);
  const T* x = static_cast<const T*>(a.x);
  float acc = 0.f;
  if (col < a.cols) {
    for (int64_t r = row_begin + ty; r < row_end; r += kColumnSumLanes) acc += to_float(x[r * a.ldx + col]);
  }
  lanes[ty][tx] = acc;
  __syncthreads();
  if (ty != 0 || col >= a.cols) return;
  float sum = 0.f;
  for (int l = 0; l < kColumnSumLanes; ++l) sum += lanes[l][tx];
  if (a.chunks == 1) {
    static_cast<T*>(a.out)[col] = convert<T>(sum);
  } else {
    a.partial[static_cast<int64_t>(blockIdx.y) * a.cols + col] = sum;
  }
}

// Pass 2: out[j] = sum over chunks c, in order, of partial[c, j].
template <typename T>
__global__ void column_sum_chunks_kernel(ColumnSumArgs a) {
  kernel_prologue();
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < a.cols;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float sum = 0.f;
    for (int c = 0; c < a.chunks; ++c) sum += a.partial[c * a.cols + j];
    static_cast<T*>(a.out)[j] = convert<T>(sum);
  }
}

// C = beta * C for a product with k == 0: every distinct C matrix of the
// batch once (C's batch dims with a stride; the items summed into one C add
// nothing), m x n elements each at row stride ldc. beta == 0 writes zeros
// without reading C (NaNs do not survive).
template <typename T>
__global__ void scale_c_kernel(GemmArgs a, int64_t numel) {
  kernel_prologue();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rem = i / a.n;
    int64_t offset = (rem % a.m) * a.ldc + i % a.n;
    rem /= a.m;
    for (int d = a.batch_ndim - 1; d >= 0; --d) {
      if (a.batch_stride[2][d] == 0) continue;
      offset += (rem % a.batch_shape[d]) * a.batch_stride[2][d];
      rem /= a.batch_shape[d];
    }
    T* p = static_cast<T*>(a.c) + offset;
    *p = a.beta == 0.f ? convert<T>(0.f) : convert<T>(a.beta * to_float(*p));
  }
}

template <typename T>
void column_sum_typed(const ColumnSumArgs& a) {
  const dim3 block(kColumnSumTile, kColumnSumLanes);
  const dim3 grid(static_cast<unsigned>((a.cols + kColumnSumTile - 1) / kColumnSumTile),
                  static_cast<unsigned>(a.chunks));
  launch_kernel(column_sum_kernel<T>, grid, block, 0, active_stream(), a);
  check_launch("column_sum");
  if (a.chunks > 1) {
    launch_kernel(column_sum_chunks_kernel<T>, blocks_for(a.cols), kThreads, 0, active_stream(), a);
    check_launch("column_sum (chunks)");
  }
}

template <typename T>
void scale_c_typed(const GemmArgs& a) {
  int64_t numel = a.m * a.n;
  for (int d = 0; d < a.batch_ndim; ++d) {
    if (a.batch_stride[2][d] != 0) numel *= a.batch_shape[d];
  }
  if (numel == 0) return;
  launch_kernel(scale_c_kernel<T>, blocks_for(numel), kThreads, 0, active_stream(), a, numel);
  check_launch("gemm (beta * out)");
}

// ---- launchers: the kernel table's entries ----

void gemm_launch(const GemmArgs& a) {
  if (a.m == 0 || a.n == 0) return;   // nothing to write
  if (a.k != 0) return cublas_gemm(a);
  if (a.beta == 1.f) return;           // an empty sum leaves C as it is
  switch (a.c_dtype) {
    case DType::kFloat16: return scale_c_typed<__half>(a);
    case DType::kBFloat16: return scale_c_typed<__nv_bfloat16>(a);
    default: return scale_c_typed<float>(a);
  }
}

int64_t gemm_workspace_bytes(const GemmArgs& a) {
  return a.m == 0 || a.n == 0 || a.k == 0 ? 0 : cublas_gemm_workspace_bytes(a);
}

void column_sum_launch(const ColumnSumArgs& a) {
  if (a.cols == 0) return;
  switch (a.dtype) {
    case DType::kFloat16: return column_sum_typed<__half>(a);
    case DType::kBFloat16: return column_sum_typed<__nv_bfloat16>(a);
    default: return column_sum_typed<float>(a);
  }
}

// Row chunks of rows: at least kColumnSumChunkRows rows each, at most kColumnSumMaxChunks.
int column_sum_chunks(int64_t rows) {
  const int64_t c = (rows + kColumnSumChunkRows - 1) / kColumnSumChunkRows;
  return static_cast<int>(c < 1 ? 1 : (c > kColumnSumMaxChunks ? kColumnSumMaxChunks : c));
}

}  // namespace

extern const GemmKernels kGemm = {
    .gemm = kernel<&gemm_launch>(),
    .half_operands = true,             // cuBLAS takes f16/bf16 A and B, with f32 compute
    .max_size = INT64_MAX,             // the _64 cuBLAS API
    .workspace_bytes = &gemm_workspace_bytes,
    .column_sum = kernel<&column_sum_launch>(),
    .column_sum_chunks = &column_sum_chunks,
};

}  // namespace encore::cuda
