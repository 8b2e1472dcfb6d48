// The backend surface the op layer calls: the device-neutral host side of
// every kernel family. Each function checks its arguments, fills the family's
// argument struct (src/backends/kernel_table.h) and launches the kernel of
// the output's device, with the one read/write list the recorder and the
// planner trust. Ops never name a backend.
//
//   backend::binary(BinaryOp::kAdd, out, a, b);     // the CPU or CUDA kernel, by out.device()
//
// Unless a function says otherwise, every tensor lives on one device, inputs
// may have any strides and outputs are allocated by the caller. Errors: the
// functions throw encore::Error naming the op (a dtype the kernel does not
// support, shapes that do not fit); "internal:" messages mean the op layer
// broke a contract. Backends never include autograd or ops.
#pragma once

#include <cstdint>

#include "absl/types/span.h"
#include "encore/tensor.h"
#include "src/backends/kernel_table.h"
#include "src/backends/op_kinds.h"

// Families not yet moved onto the kernel table: one header per backend each.
#include "src/backends/cpu/copy.h"
#include "src/backends/cpu/nn.h"
#include "src/backends/cpu/reduce.h"
#include "src/backends/cpu/select.h"
#include "src/backends/cpu/unary.h"

#if ENCORE_HAVE_CUDA
#include "src/backends/cuda/copy.h"
#include "src/backends/cuda/nn.h"
#include "src/backends/cuda/reduce.h"
#include "src/backends/cuda/select.h"
#include "src/backends/cuda/unary.h"

#define ENCORE_KERNEL(device, fn, ...) \
  ((device).is_cuda() ? ::encore::cuda::fn(__VA_ARGS__) : ::encore::cpu::fn(__VA_ARGS__))
#else
#define ENCORE_KERNEL(device, fn, ...) ::encore::cpu::fn(__VA_ARGS__)
#endif

namespace encore::backend {

// The kernel table of `device`'s backend. Throws (Unimplemented) for a CUDA
// device when encore was built without CUDA.
const KernelTable& kernels_for(Device device);

// A new dense tensor on `target` holding dense `src`, when exactly one of
// src's device and `target` is the CPU and the other's backend copies to and
// from the host (KernelTable::copy_host_device; on CUDA through pinned
// staging, NOTE [ Staged host-to-device copies ]). `op` names the caller in
// errors (Unimplemented: a device this build has no backend for).
Tensor copy_to_device(const Tensor& src, Device target, const char* op);

// ---- binary (binary.cpp) ----

// out = a + alpha * b (kAdd), a - alpha * b (kSub), a * b, a / b. out has the
// broadcast shape (any strides, may alias a for in-place); all one dtype, not bool.
void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha = 1.0);
// out = a + s, a * s, s - a, s / a.
void binary_scalar(ScalarOp op, const Tensor& out, const Tensor& a, double s);

// ---- optim (optim.cpp) ----
//
// The kernels of the optimizers (src/optim/): NOTE [ Step state lives on the
// device ] (src/backends/kernel_table.h): lr, step and the clipping scale are
// tensors the kernels read where they run, so a captured graph replays their
// current values. Parameters and gradients: f32, f16 or bf16 (same dtype,
// same shape, any strides); updates compute in f32 (src/backends/optim_math.h).
// State tensors (momentum, exp_avg, exp_avg_sq) are f32 of the parameter's
// shape; lr is f32 with one element, step i64 with one element, all on the
// parameter's device. Each function lists every storage its kernel reads or
// writes.
//
//   backend::increment(step);                                 // step: i64 0-d
//   backend::adamw_update(p, p.grad(), m, v, lr, step, 0.9, 0.999, 1e-8, 0.01);

// One SGD step in place (PyTorch semantics, dampening 0). momentum_buf is
// undefined for plain SGD (momentum == 0), else it is read and updated.
void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf, const Tensor& lr,
                double momentum, bool nesterov, double weight_decay);

// One AdamW step in place; reads lr (f32) and the step count t (i64, already
// incremented for this step) from device memory.
void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const Tensor& lr, const Tensor& step, double beta1, double beta2, double eps,
                  double weight_decay);

// One AdamW update of many parameters in one launch (the same bits as one
// adamw_update per parameter), on table's device. `table`: a dense tensor
// holding `count` AdamWEntry rows (src/backends/kernel_table.h) whose arrays
// are all dense, `total` elements in all; every parameter has `dtype`.
// `reads` / `writes`: every storage the update reads (table, p, g, m, v, lr,
// step) / writes (p, m, v).
void adamw_update_many(const Tensor& table, int64_t count, int64_t total, DType dtype,
                       absl::Span<Storage* const> reads, absl::Span<Storage* const> writes, const Tensor& lr,
                       const Tensor& step, double beta1, double beta2, double eps, double weight_decay);

// counter += 1 (i64, one element).
void increment(const Tensor& counter);

// partial[slot] = sum of x^2 (x float, any strides; partial f32 contiguous,
// on x's device). Summed in double in an order fixed by x's size, so the
// result does not depend on the number of threads.
void sum_of_squares(const Tensor& x, const Tensor& partial, int64_t slot);

// norm = sqrt(sum(partial)); scale = min(1, max_norm / (norm + 1e-6)).
// partial: f32 [P]; norm and scale: f32 with one element.
void clip_coefficient(const Tensor& partial, const Tensor& norm, const Tensor& scale, double max_norm);

// x *= scale[0] in place (x float, any strides, no broadcast dims); writes
// nothing when scale[0] >= 1 or is NaN.
void scale_in_place(const Tensor& x, const Tensor& scale);

// ---- gemm (gemm.cpp) ----
//
// Matrix products through the backend's BLAS (OpenBLAS cblas_sgemm on CPU,
// cuBLAS on CUDA), and the column sums of bias gradients.
//
//   backend::matmul(out, x, w.t());     // w.t() goes to BLAS transposed: no copy
//
// NOTE [ Matmul layouts ]: a matrix operand is passed to BLAS as is when one
// of its last two dims has unit stride (row-major -> not transposed,
// column-major such as w.t() -> transposed, leading dim = the other stride).
// Only a matrix with no unit stride (e.g. a column slice with step 2, or an
// expanded row) is copied. Batch dims may have any strides, 0 included
// (broadcast). src/backends/matmul_layout.h decides.
//
// NOTE [ Matmul accumulation ]: out's batch dims may be smaller than the
// broadcast batch of a and b (size 1 or missing). Those dims are reduced: the
// products of the batch items that map to the same out matrix are summed into
// it (beta applies to the first, then beta = 1). Backward uses this to sum a
// gradient over broadcast batch dims in the GEMM itself, with no temporary of
// the broadcast size and no separate reduction.
//
// f16/bf16 accumulate in f32. On CPU the operands are converted to f32 (a
// copy), multiplied with sgemm and the result rounded back on store: OpenBLAS
// 0.3.21 has no f16 GEMM that we can rely on. On CUDA cuBLAS takes them as
// they are; a product summed over batch items accumulates in an f32 copy of
// out, rounded into out once (NOTE [ CUDA matmul batches ] in cuda/blas.cpp).

// out[.., n, m] = alpha * a[.., n, k] @ b[.., k, m] + beta * out, all of one
// float dtype (f32, f16, bf16) on one device, each at least 2-D. a and b: any
// strides; their batch dims broadcast (NumPy) against out's; out's last dim
// has unit stride (fresh tensors always do). beta = 0 overwrites out (never
// reads it).
void matmul(const Tensor& out, const Tensor& a, const Tensor& b, float alpha = 1.f, float beta = 0.f);

// out[j] = sum_i x[i, j]: column sums of a 2-D x (any strides; copied if its
// rows are not contiguous) into a contiguous 1-D out, same float dtype,
// accumulated in f32. Used for a bias gradient.
void column_sum(const Tensor& out, const Tensor& x);

}  // namespace encore::backend
