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

namespace encore {
class Tensor;
}  // namespace encore

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

// ---- optim: SGD and AdamW updates, the step counter, gradient-norm clipping ----
//
// NOTE [ Step state lives on the device ] (encore/optim.h): the learning
// rate, the step count and the clipping scale are read by the kernels through
// pointers to tensor data, never passed as host values, so a captured graph
// replays with their current values. Parameters and gradients are f32, f16 or
// bf16 (`dtype`); updates compute in f32 (src/backends/optim_math.h); state
// tensors (momentum, exp_avg, exp_avg_sq) are f32 of the parameter's shape.

// One SGD step in place; operands param, grad (dtype) and the f32 momentum
// buffer (operand 2 is param itself, never touched, without momentum).
struct SgdArgs {
  Layout<3> l;
  DType dtype;
  bool has_momentum, nesterov;
  const float* lr;             // device scalar: this step's learning rate
  float momentum, weight_decay;
};

// One AdamW step in place; operands param, grad (dtype), exp_avg, exp_avg_sq (f32).
struct AdamWArgs {
  Layout<4> l;
  DType dtype;
  const float* lr;             // device scalar: this step's learning rate
  const int64_t* step;         // device scalar: t, counting this step (t >= 1)
  float beta1, beta2, eps, weight_decay;
};

// One parameter of a multi-tensor AdamW launch (NOTE [ One AdamW launch ] in
// src/optim/adamw.cpp). All four arrays are dense (contiguous) with `numel`
// elements; p and g of the launch's dtype, m and v f32. `start` is the sum of
// numel over the entries before this one.
struct AdamWEntry {
  char* p;
  const char* g;
  float* m;
  float* v;
  int64_t numel;
  int64_t start;
};

// One AdamW step of every row of `table` (the same bits as one AdamWArgs
// launch per row).
struct AdamWManyArgs {
  const AdamWEntry* table;     // device memory of the launch's device, `count` rows
  int64_t count, total;        // rows; total = the sum of their numel
  DType dtype;                 // of every p and g
  const float* lr;
  const int64_t* step;
  float beta1, beta2, eps, weight_decay;
};

struct IncrementArgs {
  int64_t* counter;            // device scalar, += 1
};

// *out = sum of x^2 over x (operand 0, float of `dtype`), accumulated in
// double in an order that depends on the number of elements only.
struct SumSquaresArgs {
  Layout<1> l;
  DType dtype;
  double* scratch;             // `blocks` doubles (an encore temporary); null when blocks == 0
  int blocks;                  // from OptimKernels::sum_of_squares_blocks; 0 without it
  float* out;                  // one f32 slot of the partial sums
};

// norm = sqrt(sum(partial)); scale = min(1, max_norm / (norm + 1e-6)), NaN kept.
struct ClipCoefArgs {
  const float* partial;        // [n] f32, contiguous
  int64_t n;
  float* norm;                 // device scalars, written
  float* scale;
  double max_norm;
};

// x *= *scale in place (operand 0, float of `dtype`); writes nothing unless *scale < 1.
struct ScaleInPlaceArgs {
  Layout<1> l;
  DType dtype;
  const float* scale;          // device scalar
};

struct OptimKernels {
  Kernel<SgdArgs> sgd;                    // "sgd"
  Kernel<AdamWArgs> adamw;                // "adamw", one parameter of any strides
  Kernel<AdamWManyArgs> adamw_many;       // "adamw", every parameter in one launch
  Kernel<IncrementArgs> increment;        // "increment"
  // (optional) How many partial sums (doubles of SumSquaresArgs::scratch) a
  // two-pass sum of squares of n elements writes; null: the kernel needs no
  // scratch (CPU). The host allocates the scratch and lists it in the writes.
  int (*sum_of_squares_blocks)(int64_t n);
  Kernel<SumSquaresArgs> sum_of_squares;  // "sum_of_squares"
  Kernel<ClipCoefArgs> clip_coefficient;  // "clip_coefficient", one thread's work
  Kernel<ScaleInPlaceArgs> scale_in_place;   // "scale_in_place"
};

// ---- gemm: matrix products, column sums ----

// A batch of row-major products C = alpha op(A) op(B) + beta C ("gemm"):
// C[m, n], op(A)[m, k], op(B)[k, n], op(X) = X^T when trans_x (X stored
// column-major: NOTE [ Matmul layouts ] in src/backends/kernels.h). Item i of
// the batch (its multi-index over batch_shape) starts at each operand's batch
// strides; where C's batch stride is 0 and the batch dim is > 1, the items'
// products are summed into one C (NOTE [ Matmul accumulation ]): the item
// with index 0 on all those dims applies beta, the others beta = 1. k == 0:
// C = beta C (beta 0 never reads C). m == 0 or n == 0: nothing.
struct GemmArgs {
  const void* a;               // first elements
  const void* b;
  void* c;
  DType dtype;                 // of a and b: f32, or f16/bf16 where GemmKernels::half_operands
  DType c_dtype;               // of c: dtype, or f32 (an f32 accumulator for half operands)
  int64_t m, n, k;
  int64_t lda, ldb, ldc;       // row strides (elements) of A, B, C as stored
  bool trans_a, trans_b;
  float alpha, beta;
  int batch_ndim;              // 0: one product
  int64_t batch_shape[kLayoutMaxDims];
  int64_t batch_stride[3][kLayoutMaxDims];   // elements; [0] a, [1] b, [2] c; 0: broadcast (c: summed into)
  void* workspace;             // GemmKernels::workspace_bytes of scratch; null when it asks for none
  int64_t workspace_bytes;
  int device;                  // the device's index (CUDA: whose cuBLAS handle)
};

// out[j] = sum_i x[i, j], accumulated in f32 in an order that depends on the
// shape only ("column_sum").
struct ColumnSumArgs {
  const void* x;               // [rows, cols], row stride ldx elements, unit column stride
  void* out;                   // [cols], contiguous, same dtype as x
  float* partial;              // [chunks, cols] f32 scratch; null when chunks == 1
  int64_t rows, cols, ldx;
  int64_t chunk_rows;          // rows per chunk: ceil(rows / chunks)
  int chunks;                  // from GemmKernels::column_sum_chunks; 1 without it
  DType dtype;                 // f32, f16 or bf16
};

struct GemmKernels {
  Kernel<GemmArgs> gemm;
  // Whether `gemm` multiplies f16/bf16 operands itself (accumulating in f32).
  // false (CPU: OpenBLAS has sgemm only): the host converts f16/bf16
  // operands and out to f32 tensors and rounds the result into out once.
  bool half_operands;
  // The largest m, n, k and leading dim `gemm` takes (CPU: BLAS's 32-bit ints).
  int64_t max_size;
  // (optional) Bytes of device scratch `gemm` needs for these arguments
  // (CUDA: the cuBLAS workspace plus alignment slack, NOTE [ cuBLAS
  // workspace ]); null: none. The host allocates it and lists it in the writes.
  int64_t (*workspace_bytes)(const GemmArgs& a);
  Kernel<ColumnSumArgs> column_sum;
  // (optional) Row chunks of a two-pass column sum over `rows` rows (CUDA),
  // whose f32 partials the host allocates; null: one pass, no scratch.
  int (*column_sum_chunks)(int64_t rows);
};

// ---- the table ----

// One pointer per kernel family; every entry of every family is required
// unless its comment says "(optional)".
struct KernelTable {
  const char* name;                // "cpu", "cuda"
  const BinaryKernels* binary;     // binary.cpp / binary.cu
  const OptimKernels* optim;       // optim.cpp / optim.cu
  const GemmKernels* gemm;         // gemm.cpp / gemm.cu
  // (optional; null on the CPU) Copies between host memory and a device of
  // this backend: dst and src dense, same dtype and element count, exactly
  // one of them on the CPU. Host to device may return once the data is
  // staged (the host source may be reused at once); device to host returns
  // when the data is in host memory. Launched through the device's Stream.
  void (*copy_host_device)(const Tensor& dst, const Tensor& src);
};

}  // namespace encore::backend
