// cuda::unary and cuda::unary_backward: dtype checks and layouts on the host,
// then one launch of unary.cu's kernels through the device's stream.
#include "src/backends/cuda/unary.h"

#include "src/backends/cpu/dispatch.h"
#include "src/backends/cuda/unary_launch.h"
#include "src/backends/tensor_layout.h"
#include "src/core/stream.h"

namespace encore::cuda {
namespace {

using backend::kUnaryNames;
using backend::kUnaryOpCount;
constexpr const auto& kBackwardNames = backend::kUnaryBackwardNames;
constexpr bool supports_integers(UnaryOp op) { return backend::unary_supports_integers(op); }

}  // namespace

void unary(UnaryOp op, const Tensor& out, const Tensor& a, double p0, double p1) {
  const char* name = kUnaryNames[static_cast<int>(op)];
  cpu::dispatch_numeric(a.dtype(), name, [](auto) {});   // the CPU's dtype check and message
  if (!is_floating(a.dtype()) && !supports_integers(op)) {
    throw_error(absl::StatusCode::kInvalidArgument,
                absl::StrFormat("%s: needs a float tensor (f32, f16, bf16), got %s %s", name, shape_str(a.shape()),
                                dtype_name(a.dtype())));
  }
  const UnaryArgs args{backend::make_layout<2>(out, {&a}), a.dtype(), op, p0, p1};
  current_stream(out.device()).launch<&unary_launch>(name, args, {a.storage()}, {out.storage()});
}

void unary_backward(UnaryOp op, const Tensor& grad_in, const Tensor& g, const Tensor& saved, double p0,
                    double p1) {
  const char* name = kBackwardNames[static_cast<int>(op)];
  cpu::dispatch_float(saved.dtype(), name, [](auto) {});
  const UnaryBackwardArgs args{backend::make_layout<3>(grad_in, {&g, &saved}), saved.dtype(), op, p0, p1};
  current_stream(grad_in.device()).launch<&unary_backward_launch>(name, args, {g.storage(), saved.storage()},
                                                                  {grad_in.storage()});
}

}  // namespace encore::cuda
