// backend::unary and backend::unary_backward: the dtype checks, the layout
// and one launch of the output's backend kernel (cpu/unary.cpp, cuda/unary.cu).
#include "encore/error.h"
#include "src/backends/dtype_checks.h"
#include "src/backends/kernels.h"
#include "src/backends/tensor_layout.h"
#include "src/core/stream.h"

namespace encore::backend {

void unary(UnaryOp op, const Tensor& out, const Tensor& a, double p0, double p1) {
  const char* name = kUnaryNames[static_cast<int>(op)];
  check_numeric(a.dtype(), name);
  if (!is_floating(a.dtype()) && !unary_supports_integers(op)) {
    throw_error(absl::StatusCode::kInvalidArgument,
                absl::StrFormat("%s: needs a float tensor (f32, f16, bf16), got %s %s", name, shape_str(a.shape()),
                                dtype_name(a.dtype())));
  }
  const UnaryArgs args{make_layout<2>(out, {&a}), a.dtype(), op, p0, p1};
  current_stream(out.device())
      .launch(kernels_for(out.device()).unary->forward, name, args, {a.storage()}, {out.storage()});
}

void unary_backward(UnaryOp op, const Tensor& grad_in, const Tensor& g, const Tensor& saved, double p0,
                    double p1) {
  const char* name = kUnaryBackwardNames[static_cast<int>(op)];
  check_float(saved.dtype(), name);
  const UnaryBackwardArgs args{make_layout<3>(grad_in, {&g, &saved}), saved.dtype(), op, p0, p1};
  current_stream(grad_in.device())
      .launch(kernels_for(grad_in.device()).unary->backward, name, args, {g.storage(), saved.storage()},
              {grad_in.storage()});
}

}  // namespace encore::backend
