// Launchers of the CUDA binary kernels (binary.cu) and their argument
// structs: plain data that cuda::binary (binary.cpp) fills on the host and
// Stream::launch copies. nvcc-safe: no Abseil, no tensor types.
//
//   BinaryArgs args{make_layout<3>(out, {&a, &b}), out.dtype(), BinaryOp::kAdd, 1.0};
//   current_stream(out.device()).launch<&binary_launch>("add", args, {...reads}, {...writes});
#pragma once

#include "encore/dtype.h"
#include "src/backends/layout.h"
#include "src/backends/op_kinds.h"

namespace encore::cuda {

// out = a op alpha * b (alpha only for kAdd/kSub); operands out, a, b; all of `dtype` (not bool).
struct BinaryArgs {
  backend::Layout<3> l;
  DType dtype;
  backend::BinaryOp op;
  double alpha;
};

// out = a op s; operands out, a; both of `dtype` (not bool).
struct BinaryScalarArgs {
  backend::Layout<2> l;
  DType dtype;
  backend::ScalarOp op;
  double s;
};

void binary_launch(const BinaryArgs& a);
void binary_scalar_launch(const BinaryScalarArgs& a);

}  // namespace encore::cuda
