// CUDA kernels of the gemm family besides cuBLAS itself (gemm.cpp calls
// cuBLAS): deterministic column sums for bias gradients, and C = beta * C for
// products with nothing to sum. Kernels, then launchers. No Abseil here.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "src/backends/cuda/convert.cuh"
#include "src/backends/cuda/gemm_launch.h"
#include "src/backends/cuda/launch.h"

namespace encore::cuda {
namespace {

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

// out = beta * out over a strided layout (grid-stride loop over elements).
template <typename T>
__global__ void scale_kernel(backend::Layout<1> out, float beta) {
  kernel_prologue();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < out.numel;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t offset = 0, rem = i;
    for (int d = out.ndim - 1; d >= 0; --d) {
      offset += (rem % out.shape[d]) * out.stride[0][d];
      rem /= out.shape[d];
    }
    T* p = reinterpret_cast<T*>(out.ptr[0] + offset);
    *p = beta == 0.f ? convert<T>(0.f) : convert<T>(beta * to_float(*p));
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
void scale_typed(const ScaleArgs& a) {
  launch_kernel(scale_kernel<T>, blocks_for(a.out.numel), kThreads, 0, active_stream(), a.out, a.beta);
  check_launch("gemm (beta * out)");
}

}  // namespace

// ---- launchers ----

void column_sum_launch(const ColumnSumArgs& a) {
  if (a.cols == 0) return;
  switch (a.dtype) {
    case DType::kFloat16: return column_sum_typed<__half>(a);
    case DType::kBFloat16: return column_sum_typed<__nv_bfloat16>(a);
    default: return column_sum_typed<float>(a);
  }
}

void scale_launch(const ScaleArgs& a) {
  if (a.out.numel == 0) return;
  switch (a.dtype) {
    case DType::kFloat16: return scale_typed<__half>(a);
    case DType::kBFloat16: return scale_typed<__nv_bfloat16>(a);
    default: return scale_typed<float>(a);
  }
}

}  // namespace encore::cuda
