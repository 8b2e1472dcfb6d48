// Launchers of the CUDA kernels in gemm.cu (column sums, and C = beta * C
// for GEMMs with nothing to multiply) and their argument structs. Plain CUDA
// types only (no Abseil, no tensor types) so that gemm.cu compiles fast; the
// cuBLAS GEMM itself is launched from gemm.cpp. Each launcher runs on
// active_stream(), never synchronizes, and throws encore::Error if the launch
// failed (check_launch).
//
//   ColumnSumArgs a{x, out, partial, rows, cols, ldx, chunks, kFloat32};
//   current_stream(dev).launch<&column_sum_launch>("column_sum", a, {x_st}, {out_st, partial_st});
#pragma once

#include <cstdint>

#include "encore/dtype.h"
#include "src/backends/layout.h"

namespace encore::cuda {

// Column sums in two deterministic passes (no atomics: replays are bit-identical).
// Pass 1: block (x, y) sums 32 columns over row chunk y, 8 row lanes per column
// combined in a fixed order. With chunks == 1 it writes out directly; else it
// writes f32 partials [chunks, cols] and pass 2 sums them in chunk order.
inline constexpr int kColumnSumTile = 32;       // columns per block (one warp wide)
inline constexpr int kColumnSumLanes = 8;       // rows summed in parallel per column
inline constexpr int kColumnSumMaxChunks = 64;  // row chunks (grid.y) at most
inline constexpr int64_t kColumnSumChunkRows = 512;   // rows per chunk, at least (before the cap)

struct ColumnSumArgs {
  const void* x;     // [rows, cols], row stride ldx elements, unit column stride
  void* out;         // [cols], contiguous, same dtype as x
  float* partial;    // [chunks, cols] f32 scratch; null when chunks == 1
  int64_t rows, cols, ldx;
  int64_t chunk_rows;   // rows per chunk: ceil(rows / chunks)
  int chunks;           // 1..kColumnSumMaxChunks
  DType dtype;          // kFloat32, kFloat16 or kBFloat16
};
void column_sum_launch(const ColumnSumArgs& a);

// out = beta * out (out = 0 when beta == 0, never reading out: NaNs do not
// survive), for a GEMM whose sum is empty (k == 0 or an empty batch).
struct ScaleArgs {
  backend::Layout<1> out;   // strides in bytes
  float beta;
  DType dtype;              // kFloat32, kFloat16 or kBFloat16
};
void scale_launch(const ScaleArgs& a);

}  // namespace encore::cuda
