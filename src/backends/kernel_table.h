// The kernel table: everything a backend provides to run encore's ops, in
// one place. A backend (src/backends/cpu/, src/backends/cuda/) fills one
// KernelTable, family by family; the device-neutral host side of each family
// (src/backends/<family>.cpp: checks, scratch tensors, argument filling and
// the one read/write list) fills the argument structs below and launches the
// entry of the output's device through its Stream. nvcc-safe: no Abseil, no
// tensor types, so .cu files include it.
//
//   // src/backends/binary.cpp, the same for every backend:
//   const BinaryArgs args{make_layout<3>(out, {&a, &b}), out.dtype(), op, alpha};
//   current_stream(out.device()).launch(kernels_for(out.device()).binary->binary, "add", args,
//                                       {a.storage(), b.storage()}, {out.storage()});
//   // src/backends/cpu/binary.cpp: the CPU's entries
//   extern const BinaryKernels kBinary = {kernel<&binary_kernel>(), kernel<&binary_scalar_kernel>()};
//
// Adding a kernel family: its argument structs and a `<Family>Kernels` struct
// here (one commented entry per kernel, "(optional)" where a backend may
// leave it null), its host side in src/backends/<family>.cpp, its kernels in
// src/backends/cpu/<family>.cpp and src/backends/cuda/<family>.cu, and one
// line in each backend's table (cpu/kernel_table.cpp, cuda/kernel_table.cpp).
// docs/ARCHITECTURE.md walks through it.
//
// Argument structs are plain data (trivially copyable: captured graphs copy
// them). Pointers are device pointers of the launch's device, owned by
// tensors that the launch's read/write lists keep alive during capture.
// Sizes are in elements and strides in bytes unless a field says otherwise.
#pragma once

#include <cstdint>

#include "encore/dtype.h"
#include "src/backends/layout.h"
#include "src/backends/op_kinds.h"
#include "src/core/kernel.h"

namespace encore::backend {

// ---- binary: broadcasting arithmetic, tensor-scalar arithmetic ----

// out = a op alpha * b (alpha only for kAdd/kSub); operands out, a, b; all of
// `dtype` (not bool). out may alias a (in place).
struct BinaryArgs {
  Layout<3> l;
  DType dtype;
  BinaryOp op;
  double alpha;
};

// out = a op s (a + s, a * s, s - a, s / a); operands out, a; both of `dtype` (not bool).
struct BinaryScalarArgs {
  Layout<2> l;
  DType dtype;
  ScalarOp op;
  double s;
};

struct BinaryKernels {
  Kernel<BinaryArgs> binary;
  Kernel<BinaryScalarArgs> scalar;
};

// ---- reduce: sum, mean, var, max/argmax, max's backward ----

// NOTE [ Reduction geometry ]
// The input seen as kept dims x reduced dims, as if permuted so the reduced
// dims come last (backend::group_reduce_dims in tensor_layout.h fills it).
// Size-1 dims are dropped and a dim merges into the previous one of its group
// when their strides allow, so reducing the last dim of a contiguous tensor
// is one reduced dim of stride 1, and a full reduction of a contiguous tensor
// one reduced dim of numel. Merging keeps row-major order, so the linear
// index over the reduced dims is the index max() reports. Output o is the
// o-th kept index in row-major order (outputs are contiguous, so keepdim only
// changes the output's shape, not its layout).
struct ReduceGeom {
  const void* in;                   // the input's first element
  int32_t kept_ndim, red_ndim;      // both >= 1 (a size-1 dim stands in for none)
  int64_t out_numel, red_numel;     // elements; red_numel per output
  int64_t kept_shape[kLayoutMaxDims], kept_stride[kLayoutMaxDims];   // strides in input elements
  int64_t red_shape[kLayoutMaxDims], red_stride[kLayoutMaxDims];
};

// How a backend splits a reduction over its threads, from the geometry alone
// (so a shape always reduces in the same order). Filled by
// ReduceKernels::plan_sum / plan_max where a backend has them (CUDA: NOTE
// [ CUDA reduction plan ] in cuda/reduce.cu); zero and unused elsewhere (the
// CPU picks its loop from the geometry inside the kernel).
struct ReducePlan {
  int32_t tx, ty;       // outputs per block, threads per output
  int32_t splits;       // chunks per output (1: a single pass, no partials)
  bool row_threads;     // y varies fastest across the threads of a block
};

enum class SumMode : int32_t {
  kSum,                // out = sum
  kMean,               // out = sum / divisor (divisor = count)
  kSquaredDeviation,   // out = sum (x - mean[o])^2 / divisor (divisor = max(0, count - correction))
};

// out[o] = the sum (mean, squared deviation) of output o's reduced elements
// (NOTE [ Reduction geometry ]). Floats accumulate in f32, integers and bool
// in wrapping 64-bit arithmetic; out_dtype is in_dtype or the wide type (f32
// for floats, i64 otherwise); kMean and kSquaredDeviation take floats only.
struct SumArgs {
  ReduceGeom g;
  ReducePlan plan;
  DType in_dtype, out_dtype;
  SumMode mode;
  void* out;                      // contiguous, g.out_numel elements of out_dtype
  const float* mean;              // kSquaredDeviation: the mean of each output (f32, contiguous), else null
  double divisor;                 // kMean, kSquaredDeviation (see SumMode)
  void* partials;                 // scratch of plan_sum's bytes (null when it asked for none)
};

// values[o] / indices[o] = the max of output o's reduced elements and the
// row-major index within the reduced dims of its first occurrence; a NaN is
// the maximum (the first NaN wins). Needs g.red_numel > 0 unless g.out_numel is 0.
struct MaxArgs {
  ReduceGeom g;
  ReducePlan plan;
  DType dtype;                    // the input's and values' dtype: a float or an integer, not bool
  void* values;                   // contiguous, g.out_numel elements; null for argmax
  int64_t* indices;               // contiguous, g.out_numel elements
  void* partials;                 // scratch of plan_max's bytes (null when it asked for none)
};

// grad_in [outer, n, inner] = 0 except grad_in[p, indices[p, i], i] =
// grad_out[p, i]; indices outside [0, n) are skipped. All contiguous.
struct MaxBackwardArgs {
  void* grad_in;                  // [outer, n, inner] of dtype
  const void* grad_out;           // [outer, inner] of dtype
  const int64_t* indices;         // [outer, inner]
  int64_t outer, n, inner;
  DType dtype;                    // f32, f16 or bf16
};

struct ReduceKernels {
  Kernel<SumArgs> sum;                     // sum, mean and var (SumArgs::mode)
  Kernel<MaxArgs> max;                     // max and argmax (values null)
  Kernel<MaxBackwardArgs> max_backward;    // the scatter of max's gradient
  // (optional) Fill args.plan from args.g and return the bytes of scratch the
  // kernel needs in args.partials (0: none); the host allocates it and lists
  // it among the launch's writes. Null: no plan, no scratch (CPU).
  int64_t (*plan_sum)(SumArgs& args);
  int64_t (*plan_max)(MaxArgs& args);
};

// ---- the table ----

// One pointer per kernel family; every entry of every family is required
// unless its comment says "(optional)".
struct KernelTable {
  const char* name;                // "cpu", "cuda"
  const BinaryKernels* binary;     // binary.cpp / binary.cu
  const ReduceKernels* reduce;     // reduce.cpp / reduce.cu
};

}  // namespace encore::backend
