// Launchers of the CUDA unary kernels (unary.cu) and their argument structs:
// plain data that cuda::unary / cuda::unary_backward (unary.cpp) fill on the
// host. nvcc-safe: no Abseil, no tensor types.
//
//   UnaryArgs args{make_layout<2>(out, {&a}), a.dtype(), UnaryOp::kTanh, 0.0, 0.0};
//   current_stream(out.device()).launch<&unary_launch>("tanh", args, {a.storage()}, {out.storage()});
#pragma once

#include "encore/dtype.h"
#include "src/backends/layout.h"
#include "src/backends/op_kinds.h"

namespace encore::cuda {

// out = op(a); operands out, a. Integer dtypes only for abs, relu, clamp
// (the host checks); p0/p1 are converted (integers: clipped) in the launcher.
struct UnaryArgs {
  backend::Layout<2> l;
  DType dtype;
  backend::UnaryOp op;
  double p0, p1;
};

// grad_in = g * op'(saved); operands grad_in, g, saved; float dtypes only.
struct UnaryBackwardArgs {
  backend::Layout<3> l;
  DType dtype;
  backend::UnaryOp op;
  double p0, p1;
};

void unary_launch(const UnaryArgs& a);
void unary_backward_launch(const UnaryBackwardArgs& a);

}  // namespace encore::cuda
