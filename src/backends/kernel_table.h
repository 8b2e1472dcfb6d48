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

// ---- unary: elementwise math (unary_math.h) and its fused backward ----

// out = op(a); operands out, a, both of `dtype`: a float dtype, or i32/i64
// for abs, relu and clamp (unary_supports_integers; the host refuses the
// rest). p0, p1: the op's scalars as the caller gave them (pow: the exponent;
// clamp: the bounds, whole numbers or infinite for integers); each kernel
// converts them to the compute type with unary_param (integers: clipped).
struct UnaryArgs {
  Layout<2> l;
  DType dtype;
  UnaryOp op;
  double p0, p1;
};

// grad_in = g * op'(saved), saved being y or x as unary_saves_output says;
// operands grad_in, g, saved, all of `dtype` (a float dtype).
struct UnaryBackwardArgs {
  Layout<3> l;
  DType dtype;
  UnaryOp op;
  double p0, p1;
};

struct UnaryKernels {
  Kernel<UnaryArgs> forward;              // "exp", "tanh", ... (kUnaryNames)
  Kernel<UnaryBackwardArgs> backward;     // "exp_backward", ... (kUnaryBackwardNames)
};

// ---- select: where, masked_fill ----
// Elements are moved as storage bytes, never converted, so every dtype is
// exact; bool operands are read as bytes and tested against zero.

// out = cond ? a : b; operands out, cond (bool), a, b; out, a, b of `dtype`
// (any, bool included).
struct WhereArgs {
  Layout<4> l;
  DType dtype;
};

// out = (mask == fill_when) ? value : a; operands out, a, mask (bool); out
// and a of `dtype` (any).
struct MaskedFillArgs {
  Layout<3> l;
  DType dtype;
  uint64_t value_bits;   // the value converted to `dtype` (value_bits in convert.h): its storage bytes, low first
  bool fill_when;
};

struct SelectKernels {
  Kernel<WhereArgs> where;               // "where"
  Kernel<MaskedFillArgs> masked_fill;    // "masked_fill"; with value 0 also the backward of both ops
};

// ---- copy: fill, strided copy with dtype conversion, arange, random ----

// Every element of operand 0 = the value; any strides, any dtype.
struct FillArgs {
  Layout<1> l;
  DType dtype;
  uint64_t value_bits;   // the value converted to `dtype` (value_bits in convert.h): its storage bytes, low first
};

// dst = convert(src) (convert.h; bit for bit on both backends); operands dst,
// src (broadcast to dst); any pair of dtypes; both on one device.
struct CopyArgs {
  Layout<2> l;
  DType dst_dtype, src_dtype;
};

// out[i] = convert(start + step * i), the sum in double; out dense, n elements.
struct ArangeArgs {
  void* out;
  int64_t n;
  DType dtype;   // not bool
  double start, step;
};

// out[i] = draw i of Philox (src/core/philox.h) at counter state[1] + i, key
// state[0]: uniform on [0, 1) (kept below 1 after rounding to f16/bf16) or
// standard normal; then state[1] += n, on the device, after every draw
// (a captured step draws new numbers on every replay). out dense, n
// elements of a float `dtype`; state: two i64 {seed, offset} on out's
// device, read and written only by the kernel.
struct RandomArgs {
  void* out;
  int64_t n;
  int64_t* state;
  DType dtype;
  RandomKind kind;
};

struct CopyKernels {
  Kernel<FillArgs> fill;        // "fill"
  Kernel<CopyArgs> copy;        // "copy"
  Kernel<ArangeArgs> arange;    // "arange"
  Kernel<RandomArgs> random;    // "rand" / "randn"
};

// ---- the table ----

// One pointer per kernel family; every entry of every family is required
// unless its comment says "(optional)".
struct KernelTable {
  const char* name;                // "cpu", "cuda"
  const BinaryKernels* binary;     // binary.cpp / binary.cu
  const UnaryKernels* unary;       // unary.cpp / unary.cu
  const SelectKernels* select;     // select.cpp / select.cu
  const CopyKernels* copy;         // copy.cpp / copy.cu
};

}  // namespace encore::backend
