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

#include "encore/tensor.h"
#include "src/backends/kernel_table.h"
#include "src/backends/op_kinds.h"

// Families not yet moved onto the kernel table: one header per backend each.
#include "src/backends/cpu/gemm.h"
#include "src/backends/cpu/nn.h"
#include "src/backends/cpu/optim.h"
#include "src/backends/cpu/reduce.h"

#if ENCORE_HAVE_CUDA
#include "src/backends/cuda/gemm.h"
#include "src/backends/cuda/nn.h"
#include "src/backends/cuda/optim.h"
#include "src/backends/cuda/reduce.h"

#define ENCORE_KERNEL(device, fn, ...) \
  ((device).is_cuda() ? ::encore::cuda::fn(__VA_ARGS__) : ::encore::cpu::fn(__VA_ARGS__))
#else
#define ENCORE_KERNEL(device, fn, ...) ::encore::cpu::fn(__VA_ARGS__)
#endif

namespace encore::backend {

// The kernel table of `device`'s backend. Throws (Unimplemented) for a CUDA
// device when encore was built without CUDA.
const KernelTable& kernels_for(Device device);

// ---- binary (binary.cpp) ----

// out = a + alpha * b (kAdd), a - alpha * b (kSub), a * b, a / b. out has the
// broadcast shape (any strides, may alias a for in-place); all one dtype, not bool.
void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha = 1.0);
// out = a + s, a * s, s - a, s / a.
void binary_scalar(ScalarOp op, const Tensor& out, const Tensor& a, double s);

// ---- unary (unary.cpp) ----
// Elementwise unary math (exp, log, ..., gelu, clamp) and the fused backward
// of each op: one launch computes grad_in from the output gradient and one
// saved tensor, instead of a chain of elementwise ops.
//
//   backend::unary(UnaryOp::kTanh, y, x);                    // y = tanh(x)
//   backend::unary_backward(UnaryOp::kTanh, dx, dy, y);       // dx = dy * (1 - y^2)
//
// Each op's backward reads either its forward output y or its input x; which
// one is fixed per op by unary_saves_output() (op_kinds.h) so that the op
// layer saves the right tensor.

// out = op(a). out: contiguous, a's shape and dtype; a: any strides. Floats,
// and i32/i64 for abs, relu and clamp. For integer clamp, p0/p1 must be whole
// numbers (or infinite); they are clipped to the dtype's range.
void unary(UnaryOp op, const Tensor& out, const Tensor& a, double p0 = 0.0, double p1 = 0.0);
// grad_in = g * op'(...), using `saved` (y or x, see unary_saves_output).
// grad_in: contiguous; g and saved: its shape and dtype, any strides. Floats only.
void unary_backward(UnaryOp op, const Tensor& grad_in, const Tensor& g, const Tensor& saved, double p0 = 0.0,
                    double p1 = 0.0);

// ---- select (select.cpp) ----
// Elementwise selection. masked_fill with value 0 is also the fused backward
// of both ops (one launch: the gradient with zeros where it does not flow).
//
//   backend::where(out, cond, a, b);                    // out = cond ? a : b
//   backend::masked_fill(out, a, mask, -INFINITY);      // out = mask ? -inf : a
//   backend::masked_fill(ga, g, cond, 0.0, false);      // ga  = cond ? g : 0

// out = cond ? a : b. out: contiguous, the broadcast shape of all three;
// cond: bool; a, b: out's dtype (any); inputs broadcast to out, any strides.
void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
// out = (mask == fill_when) ? value : a. out: contiguous, of a broadcast shape
// that a and mask (bool) broadcast to; value converted to out's dtype (the op
// checks that it fits; to bool: value != 0).
void masked_fill(const Tensor& out, const Tensor& a, const Tensor& mask, double value, bool fill_when = true);

// ---- copy (copy.cpp) ----
// Kernels that create and move data on one device (host <-> device transfers
// are cuda::copy_host_device, src/backends/cuda/transfer.h).

// Every element of out = value converted to out's dtype (convert.h). out: any strides, any dtype.
void fill(const Tensor& out, double value);
// dst = src converted to dst's dtype (convert.h; the same bits on every
// backend). src broadcast to dst; any strides; any pair of dtypes; one device.
void copy(const Tensor& dst, const Tensor& src);
// out[i] = start + step * i (in double, then converted). out: contiguous, not bool.
void arange(const Tensor& out, double start, double step);
// out = uniform [0, 1) (kUniform) or standard normal (kNormal) Philox draws.
// out: contiguous float; state: i64 [2] {seed, offset} on out's device; the
// kernel advances offset by out.numel() on the device (so a captured step
// draws new numbers on every replay).
void random(const Tensor& out, const Tensor& state, RandomKind kind);

}  // namespace encore::backend
