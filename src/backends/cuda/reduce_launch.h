// Launchers of the CUDA reduction kernels (reduce.cu) and their argument
// structs: plain data (no Abseil, no tensor types) shared by reduce.cpp, which
// fills them on the host, and reduce.cu, which launches the kernels.
//
//   SumLaunchArgs args{geom, plan, ReduceType::kF32, ReduceType::kF32, SumMode::kSum, out_ptr, ...};
//   current_stream(device).launch<&sum_launcher>("sum", args, {a.storage()}, {out.storage()});
//
// Pointers are device pointers owned by encore tensors that outlive the
// launch (the stream's reads/writes lists keep them alive during capture).
#pragma once

#include <cstdint>

#include "src/backends/layout.h"

namespace encore::cuda {

inline constexpr int kReduceThreads = 256;   // threads per block of every reduction kernel
inline constexpr int kReduceMaxSplits = 1024;   // chunks of one output in the two-pass scheme

// The storage types the reduction kernels support (f16/bf16/bool included).
enum class ReduceType : int32_t { kF32, kF16, kBF16, kI32, kI64, kBool };

enum class SumMode : int32_t {
  kSum,                // out = sum
  kMean,               // out = sum / divisor (divisor = count)
  kSquaredDeviation,   // out = sum (x - mean[o])^2 / divisor (divisor = max(0, count - correction))
};

// NOTE [ CUDA reduction geometry ]
// As the CPU backend's (NOTE [ Reduction geometry ] in src/backends/cpu/reduce.cpp):
// the input seen as kept dims x reduced dims, size-1 dims dropped, dims
// merged within each group where the strides allow, so the row-major index
// over the reduced dims is the index max() reports and output o is the o-th
// kept index in row-major order (the output is contiguous).
struct ReduceGeom {
  const void* in;                   // the input's first element (device)
  int32_t kept_ndim, red_ndim;      // both >= 1 (a size-1 dim stands in for none)
  int64_t out_numel, red_numel;     // elements; red_numel per output
  int64_t kept_shape[backend::kLayoutMaxDims], kept_stride[backend::kLayoutMaxDims];   // strides in elements
  int64_t red_shape[backend::kLayoutMaxDims], red_stride[backend::kLayoutMaxDims];
};

// NOTE [ CUDA reduction plan ]
// Every block has kReduceThreads = tx * ty threads (both powers of two): tx
// adjacent outputs, ty threads per output that split its reduced elements
// (thread y takes elements y, y + ty, ...; each accumulates in index order)
// and then combine in a fixed shared-memory tree. `row_threads` puts y in the
// fast-varying thread index (rows whose reduced elements are adjacent in
// memory: one block or a few warps per row, coalesced along the row); else x
// is fast (columns: adjacent outputs adjacent in memory; ty = 1 is a thread
// per output). With splits > 1 the reduced range of each output is cut into
// `splits` equal chunks (grid y); pass one writes one partial per chunk into
// a temporary, pass two combines them in chunk order. The plan depends on
// the geometry alone, so a shape always reduces in the same order and
// replays are bit-identical (no atomics anywhere).
struct ReducePlan {
  int32_t tx, ty;       // outputs per block, threads per output
  int32_t splits;       // chunks per output (1: a single pass)
  bool row_threads;     // y varies fastest across the threads of a block
};

struct SumLaunchArgs {
  ReduceGeom g;
  ReducePlan p;
  ReduceType in_type, out_type;   // out_type: in_type, or the wide type (f32 for floats, i64 otherwise)
  SumMode mode;
  void* out;                      // contiguous, g.out_numel elements
  const float* mean;              // kSquaredDeviation: the mean of each output (f32, contiguous)
  double divisor;                 // kMean, kSquaredDeviation
  void* partials;                 // p.splits > 1: splits * out_numel partials (8 bytes each), else null
  const char* op;                 // static string for launch errors
};

struct MaxLaunchArgs {
  ReduceGeom g;
  ReducePlan p;
  ReduceType type;                // not kBool
  void* values;                   // contiguous, the input's type; null for argmax
  int64_t* indices;               // contiguous
  void* partials;                 // p.splits > 1: splits * out_numel partials (16 bytes each), else null
  const char* op;
};

struct MaxBackwardLaunchArgs {
  void* grad_in;                  // contiguous [outer, n, inner]
  const void* grad_out;           // contiguous [outer, inner]
  const int64_t* indices;         // contiguous [outer, inner]
  int64_t outer, n, inner;
  ReduceType type;                // kF32, kF16 or kBF16
};

// Bytes of one partial in SumLaunchArgs::partials / MaxLaunchArgs::partials.
inline constexpr int64_t kSumPartialBytes = 8;
inline constexpr int64_t kMaxPartialBytes = 16;

void sum_launcher(const SumLaunchArgs& a);
void max_launcher(const MaxLaunchArgs& a);
void max_backward_launcher(const MaxBackwardLaunchArgs& a);

}  // namespace encore::cuda
